// tensor/stream.h with the CUDA runtime: Stream and Event RAII wrappers and the per-device current stream.
//
// The current stream of each device is process-wide (every thread launching on device d uses the same
// one) and starts as the legacy default stream. It is kept twice: as a Stream, which owns the handle and
// keeps it alive, and as an atomic raw cudaStream_t that the kernel launch path reads without a lock.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/cuda_device.h"
#include "tensor/internal/cuda_check.h"
#include "tensor/internal/cuda_context.h"
#include "tensor/stream.h"

namespace tinyddp::cuda {
namespace {

void CheckDevice(int device, const char* what) {
  if (device < 0 || device >= DeviceCount()) {
    std::fprintf(stderr, "tinyddp: %s: CUDA device %d does not exist (%d visible).\n", what, device, DeviceCount());
    std::abort();
  }
}

// The current streams. Leaked on purpose: streams set current live until the process exits, and
// destroying them from a static destructor would race with the CUDA runtime's own teardown.
struct CurrentStreams {
  std::mutex mu;
  std::vector<Stream> streams;                    // guarded by mu; default Stream() = legacy stream
  std::unique_ptr<std::atomic<void*>[]> handles;  // the same, as raw handles, read without mu

  explicit CurrentStreams(int n) : streams(n), handles(new std::atomic<void*>[n]) {
    for (int i = 0; i < n; ++i) handles[i].store(nullptr);
  }
};

CurrentStreams& Registry() {
  static CurrentStreams* registry = new CurrentStreams(DeviceCount());
  return *registry;
}

// Destructors may run while the process exits, after the CUDA runtime has begun unloading: that error
// is expected there and ignored; anything else is reported but does not abort a destructor.
void CheckInDestructor(cudaError_t err, const char* what) {
  if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
    std::fprintf(stderr, "tinyddp: %s failed: %s\n", what, cudaGetErrorString(err));
  }
}

}  // namespace

namespace internal {

cudaStream_t CurrentStreamHandle(int device) {
  return static_cast<cudaStream_t>(Registry().handles[device].load(std::memory_order_acquire));
}

}  // namespace internal

Stream Stream::Create(int device, int priority) {
  CheckDevice(device, "Stream::Create");
  internal::DeviceGuard guard(device);
  // Non-blocking: the stream never waits implicitly for the legacy default stream; ordering between
  // streams is always explicit, through events.
  cudaStream_t raw = nullptr;
  CUDA_CHECK(cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking, priority));
  Stream s;
  s.handle_ = std::make_shared<Handle>();
  s.handle_->raw = raw;
  s.handle_->owned = true;
  s.handle_->device = device;
  s.device_ = device;
  return s;
}

Stream Stream::Current(int device) {
  CheckDevice(device, "Stream::Current");
  CurrentStreams& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Stream s = r.streams[device];
  s.device_ = device;  // the default-constructed entry is the legacy stream of `device`
  return s;
}

Stream Stream::SetCurrent(const Stream& stream) {
  CheckDevice(stream.device(), "Stream::SetCurrent");
  CurrentStreams& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Stream previous = r.streams[stream.device()];
  previous.device_ = stream.device();
  r.streams[stream.device()] = stream;
  r.handles[stream.device()].store(stream.handle(), std::memory_order_release);
  return previous;
}

void Stream::Wait(const Event& event) const {
  if (event.handle() == nullptr) return;  // never recorded: nothing to wait for, as in CUDA
  internal::DeviceGuard guard(device_);
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle()), static_cast<cudaEvent_t>(event.handle()), 0));
}

void Stream::Synchronize() const {
  if (DeviceCount() == 0) return;
  internal::DeviceGuard guard(device_);  // the legacy stream (nullptr) means the current device's
  internal::CheckNotCapturing(static_cast<cudaStream_t>(handle()), "Stream::Synchronize");
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle())));
}

bool Stream::IsCapturing() const {
  if (DeviceCount() == 0 || handle() == nullptr) return false;  // the legacy stream is never captured
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(handle()), &status));
  return status != cudaStreamCaptureStatusNone;
}

Stream::Handle::~Handle() {
  if (!owned || raw == nullptr) return;
  cudaStream_t s = static_cast<cudaStream_t>(raw);
  internal::OnStreamDestroy(device, s);
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;  // runtime already gone at exit
  if (previous != device) cudaSetDevice(device);
  CheckInDestructor(cudaStreamDestroy(s), "cudaStreamDestroy");
  if (previous != device) cudaSetDevice(previous);
}

Event::Event(bool enable_timing) : timing_(enable_timing) {}

Event::~Event() {
  if (raw_ == nullptr) return;
  CheckInDestructor(cudaEventDestroy(static_cast<cudaEvent_t>(raw_)), "cudaEventDestroy");
}

void Event::Record(const Stream& stream) {
  CheckDevice(stream.device(), "Event::Record");
  internal::DeviceGuard guard(stream.device());
  if (raw_ != nullptr && device_ != stream.device()) {
    // CUDA events belong to one device: recording on another device's stream needs a new one.
    CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(raw_)));
    raw_ = nullptr;
  }
  if (raw_ == nullptr) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    raw_ = e;
    device_ = stream.device();
  }
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(raw_), static_cast<cudaStream_t>(stream.handle())));
}

bool Event::Query() const {
  if (raw_ == nullptr) return true;
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(raw_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error: keep it from reaching the next check
    return false;
  }
  CUDA_CHECK(err);
  return true;
}

void Event::Synchronize() const {
  if (raw_ == nullptr) return;
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(raw_)));
}

float Event::ElapsedMs(const Event& start, const Event& end) {
  if (!start.timing_ || !end.timing_ || start.raw_ == nullptr || end.raw_ == nullptr) {
    std::fprintf(stderr,
                 "tinyddp: Event::ElapsedMs needs two recorded timing events (Event(/*enable_timing=*/true)).\n");
    std::abort();
  }
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.raw_), static_cast<cudaEvent_t>(end.raw_)));
  return ms;
}

}  // namespace tinyddp::cuda
