// The pieces of the CUDA runtime layer that the kernels and the allocator share, in CUDA terms:
// a guard that makes a device current for a scope, and the current stream as a raw cudaStream_t.
// Internal to tensor/: the public, CUDA-free versions are tensor/cuda_device.h and tensor/stream.h.
#ifndef TINYDDP_TENSOR_INTERNAL_CUDA_CONTEXT_H_
#define TINYDDP_TENSOR_INTERNAL_CUDA_CONTEXT_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/internal/cuda_check.h"

namespace tinyddp::cuda::internal {

/// Makes `device` current for the lifetime of the guard and restores the previous device afterwards.
/// cudaGetDevice only reads thread-local state, and cudaSetDevice runs only when the device changes,
/// so the guard costs next to nothing in the usual one-GPU-per-process case.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);  // best effort: destructors do not stop the program
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

/// The current stream of `device` (tensor/stream.h), without taking a lock or copying a handle: the
/// launch path of every kernel calls it. nullptr is the legacy default stream. Precondition: device is
/// in [0, DeviceCount()).
cudaStream_t CurrentStreamHandle(int device);

/// Called by Stream's owner just before it destroys `stream`, so the caching allocator stops recording
/// events on it and hands its cached blocks to other streams once the stream's last work is done.
void OnStreamDestroy(int device, cudaStream_t stream);

// The caching allocator's private pools for CUDA graphs (cuda_rt_allocator.cc; CudaGraph uses them).
/// From now until EndGraphPool, requests on `device` for a stream taking part in the capture `capture_id`
/// (cudaStreamGetCaptureInfo's id) come from a new private pool, which is returned (opaque).
void* BeginGraphPool(int device, unsigned long long capture_id);
/// The capture is over: no more requests come here; the pool keeps its blocks for the graph's replays.
void EndGraphPool(void* pool);
/// The graph is destroyed: the pool's free blocks, and its blocks freed later, go back to the ordinary
/// pools of their streams. Stops routing requests too, if the capture never ended.
void ReleaseGraphPool(void* pool);
/// Bytes of device memory the pool holds.
int64_t GraphPoolBytes(void* pool);

}  // namespace tinyddp::cuda::internal

#endif  // TINYDDP_TENSOR_INTERNAL_CUDA_CONTEXT_H_
