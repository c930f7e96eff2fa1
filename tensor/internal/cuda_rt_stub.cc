// The CUDA runtime layer for a build without the CUDA toolkit: no devices, and any attempt to use one
// stops with a message saying how to get a CUDA build. Lets every CPU path compile and run unchanged.
#include <cstdio>
#include <cstdlib>

#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/cuda_graph.h"
#include "tensor/stream.h"

namespace tinyddp::cuda {
namespace {

[[noreturn]] void NoCuda(const char* what) {
  std::fprintf(stderr,
               "tinyddp: %s needs CUDA, but this binary was built without the CUDA toolkit "
               "(install it under /usr/local/cuda or set CUDA_HOME, then rebuild), or run on CPU.\n",
               what);
  std::abort();
}

}  // namespace

bool BuiltWithCuda() { return false; }
int DeviceCount() { return 0; }
void SetDevice(int) { NoCuda("SetDevice"); }
int CurrentDevice() { return 0; }
std::string DeviceDescription(int) { return "no CUDA (CPU-only build)"; }
int64_t DeviceTotalMemory(int) { return 0; }
void SetGemmSmCountTarget(int) {}
int GemmSmCountTarget() { return 0; }
void DeviceSynchronize() {}
void MemcpyAsync(void*, const void*, size_t, CopyKind, void*) { NoCuda("MemcpyAsync"); }

Stream Stream::Create(int, int) { NoCuda("Stream::Create"); }
Stream Stream::Current(int) { return Stream(); }
Stream Stream::SetCurrent(const Stream&) { NoCuda("Stream::SetCurrent"); }
void Stream::Wait(const Event&) const { NoCuda("Stream::Wait"); }
void Stream::Synchronize() const {}
bool Stream::IsCapturing() const { return false; }
Stream::Handle::~Handle() {}

Event::Event(bool) {}
Event::~Event() {}
void Event::Record(const Stream&) { NoCuda("Event::Record"); }
bool Event::Query() const { return true; }
void Event::Synchronize() const {}
float Event::ElapsedMs(const Event&, const Event&) { NoCuda("Event::ElapsedMs"); }

CudaGraph::CudaGraph() = default;
CudaGraph::~CudaGraph() = default;
absl::Status CudaGraph::Capture(const Stream&, const std::function<void()>&) {
  return absl::FailedPreconditionError(
      "CudaGraph::Capture: this binary was built without CUDA; a graph records GPU work");
}
absl::Status CudaGraph::Replay() { return absl::FailedPreconditionError("CudaGraph::Replay: nothing was captured"); }
int64_t CudaGraph::pool_bytes() const { return 0; }
absl::Status CudaGraph::WriteDot(const std::string&) const {
  return absl::FailedPreconditionError("CudaGraph::WriteDot: nothing was captured");
}

void* CachingMalloc(size_t, int, void*) { NoCuda("CachingMalloc"); }
void CachingFree(void*) { NoCuda("CachingFree"); }
void EmptyCache() {}
AllocatorStats GetAllocatorStats(int) { return {}; }
// Without CUDA, "pinned" memory is ordinary aligned host memory.
void* PinnedMalloc(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
void PinnedFree(void* ptr) { std::free(ptr); }

}  // namespace tinyddp::cuda
