// Storage allocation on the host or a GPU, and byte copies between any two devices (tensor/storage.h).
// Host blocks are 64-byte aligned so Eigen and auto-vectorised loops may use aligned vector loads;
// GPU blocks come from the caching allocator so a steady-state training step never calls cudaMalloc.
#include "tensor/storage.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "base/check.h"
#include "tensor/internal/host_heap.h"
#include "tensor/stream.h"

namespace tinyddp {
namespace {

constexpr size_t kHostAlignment = 64;

// Makes `device` current for this thread for the guard's lifetime, so "the current stream" in the
// cuda:: calls below means the stream of the GPU the bytes live on, not whichever GPU was current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : previous_(cuda::CurrentDevice()) {
    if (previous_ != device) cuda::SetDevice(device);
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cuda::SetDevice(previous_);
  }

 private:
  int previous_;
  bool changed_ = false;
};

void CheckCudaDevice(Device device, const char* op) {
  TINYDDP_CHECK_OP(cuda::BuiltWithCuda(), op, "tensor on ", device.ToString(),
                   " but tinyddp was built without CUDA; hint: use Device::CPU(), or rebuild with the CUDA "
                   "toolkit under /usr/local/cuda (or CUDA_HOME)");
  const int count = cuda::DeviceCount();
  TINYDDP_CHECK_OP(device.index >= 0 && device.index < count, op, "no such GPU: ", device.ToString(), " (", count,
                   " visible); hint: check CUDA_VISIBLE_DEVICES or use Device::CPU()");
}

// GetHostMemoryStats's counters.
std::atomic<int64_t> host_live_bytes{0};
std::atomic<int64_t> host_peak_bytes{0};

void CountHostBytes(int64_t delta) {
  const int64_t live = host_live_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = host_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !host_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

std::shared_ptr<Storage> AllocateHost(size_t nbytes, const char* op) {
  internal::KeepFreedHostMemoryMapped();  // once: freed tensors stay mapped for the next step to reuse
  // aligned_alloc wants a multiple of the alignment; at least one block so data() is never null.
  const size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* p = std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
  TINYDDP_CHECK_OP(p != nullptr, op, "out of host memory allocating ", nbytes, " bytes");
  CountHostBytes(static_cast<int64_t>(nbytes));
  return std::make_shared<Storage>(p, nbytes, Device::CPU(), [nbytes](void* q) {
    CountHostBytes(-static_cast<int64_t>(nbytes));
    std::free(q);
  });
}

}  // namespace

HostMemoryStats GetHostMemoryStats() {
  return {host_live_bytes.load(std::memory_order_relaxed), host_peak_bytes.load(std::memory_order_relaxed)};
}

void ResetHostPeak() { host_peak_bytes.store(host_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

std::shared_ptr<Storage> AllocateStorage(size_t nbytes, Device device) {
  if (device.is_cpu()) return AllocateHost(nbytes, "AllocateStorage");
  CheckCudaDevice(device, "AllocateStorage");
  // The allocator ties the block to the current stream of `device` (nullptr): freeing it later makes it
  // reusable at once by work on that same stream.
  void* p = cuda::CachingMalloc(nbytes == 0 ? 1 : nbytes, device.index, nullptr);
  return std::make_shared<Storage>(p, nbytes, device, [](void* q) { cuda::CachingFree(q); });
}

std::shared_ptr<Storage> AllocatePinnedStorage(size_t nbytes) {
  if (!cuda::BuiltWithCuda() || cuda::DeviceCount() == 0) return AllocateHost(nbytes, "AllocatePinnedStorage");
  void* p = cuda::PinnedMalloc(nbytes == 0 ? 1 : nbytes);
  return std::make_shared<Storage>(p, nbytes, Device::CPU(), [](void* q) { cuda::PinnedFree(q); });
}

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  if (dst_device.is_cuda()) CheckCudaDevice(dst_device, "CopyBytes");
  if (src_device.is_cuda()) CheckCudaDevice(src_device, "CopyBytes");

  if (src_device.is_cpu()) {  // host -> device, ordered on the destination GPU's current stream
    DeviceGuard guard(dst_device.index);
    cuda::MemcpyAsync(dst, src, nbytes, cuda::CopyKind::kHostToDevice, nullptr);
    return;
  }
  if (dst_device.is_cpu()) {  // device -> host: the caller reads `dst` next, so wait for it
    DeviceGuard guard(src_device.index);
    TINYDDP_CHECK_OP(!cuda::Stream::Current(src_device.index).IsCapturing(), "CopyBytes",
                     "a CUDA tensor is read on the host (Tensor::Item, ToVector, To(CPU)) while its stream records "
                     "a CUDA graph (tensor/cuda_graph.h): inside a captured step nothing has run yet. hint: keep "
                     "the value on the device and read it after the step, or run this step eagerly");
    cuda::MemcpyAsync(dst, src, nbytes, cuda::CopyKind::kDeviceToHost, nullptr);
    cuda::Stream::Current(src_device.index).Synchronize();
    return;
  }
  if (src_device.index != dst_device.index) {
    // Two GPUs, two current streams: let the producer of `src` finish before the destination's stream
    // reads it. Cross-GPU tensor copies are rare (never on the training hot path), so a host wait is fine.
    DeviceGuard guard(src_device.index);
    cuda::Stream::Current(src_device.index).Synchronize();
  }
  DeviceGuard guard(dst_device.index);
  cuda::MemcpyAsync(dst, src, nbytes, cuda::CopyKind::kDeviceToDevice, nullptr);
}

}  // namespace tinyddp
