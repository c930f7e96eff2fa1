// The pieces of the CUDA runtime layer that the kernels and the allocator share, in CUDA terms:
// a guard that makes a device current for a scope, and the current stream as a raw cudaStream_t.
// Internal to tensor/: the public, CUDA-free versions are tensor/cuda_device.h and tensor/stream.h.
#ifndef TINYDDP_TENSOR_INTERNAL_CUDA_CONTEXT_H_
#define TINYDDP_TENSOR_INTERNAL_CUDA_CONTEXT_H_

#include <cuda_runtime.h>

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

}  // namespace tinyddp::cuda::internal

#endif  // TINYDDP_TENSOR_INTERNAL_CUDA_CONTEXT_H_
