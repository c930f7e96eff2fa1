// Storage: one reference-counted block of bytes on one device. Tensors share it: views (Reshape, Rows)
// point into the same Storage at an offset, and the bytes are returned to their allocator when the
// last Tensor referring to them goes away.
#ifndef TINYDDP_TENSOR_STORAGE_H_
#define TINYDDP_TENSOR_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace tinyddp {

class Storage {
 public:
  /// Takes ownership of `data` (nbytes on `device`); `deleter(data)` runs when the Storage dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage() {
    if (deleter_) deleter_(data_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

/// Allocates `nbytes` on `device`: 64-byte aligned host memory for the CPU, the CUDA caching allocator
/// (tensor/cuda_allocator.h, on the device's current stream) for a GPU. Contents are uninitialised.
/// Stops with a clear message on out-of-memory or on a CUDA device in a build without CUDA.
std::shared_ptr<Storage> AllocateStorage(size_t nbytes, Device device);

/// What host tensors hold right now (bytes of live CPU Storage from AllocateStorage), and the most they
/// held since the process started or the last ResetHostPeak(): the host's counterpart of the CUDA caching
/// allocator's statistics (tensor/cuda_allocator.h), for measuring memory (ZeRO's per-rank tables).
/// Thread-safe; two relaxed atomic updates per allocation.
struct HostMemoryStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
};
HostMemoryStats GetHostMemoryStats();
/// Starts a new high-water mark at the current live bytes.
void ResetHostPeak();

/// Page-locked host memory, so host<->device copies can run asynchronously on a stream.
/// Falls back to ordinary host memory in a build without CUDA or on a machine without a GPU.
std::shared_ptr<Storage> AllocatePinnedStorage(size_t nbytes);

/// Copies `nbytes` from `src` (on `src_device`) to `dst` (on `dst_device`), any pair of devices.
/// Host<->host is a memcpy. Anything touching a GPU goes through cuda::MemcpyAsync on the current stream
/// of the GPU involved (the destination's for device->device), so it is ordered after the kernels that
/// produced `src`. When the destination is the host, the copy has finished when this returns; a copy
/// into device memory may still be in flight (stream-ordered), like any kernel.
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_STORAGE_H_
