// The CUDA caching allocator: device memory comes from cudaMalloc once and is then reused, so a training
// step in steady state calls neither cudaMalloc nor cudaFree (docs/design.md, "No allocations").
//
// Blocks are kept in size-class bins per device and per stream: a freed block is reused at once by work
// on the stream that freed it (stream order makes that safe), and by other streams only after an event
// recorded on the freeing stream has completed. Thread-safe. Statistics let tests assert the steady state.
#ifndef TINYDDP_TENSOR_CUDA_ALLOCATOR_H_
#define TINYDDP_TENSOR_CUDA_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>

namespace tinyddp::cuda {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // held by live tensors
  int64_t reserved_bytes = 0;        // obtained from cudaMalloc and not yet released
  int64_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  int64_t num_cuda_malloc = 0;       // cudaMalloc calls so far
  int64_t num_cuda_free = 0;         // cudaFree calls so far
};

/// Returns `bytes` of device memory on `device` for use on `stream` (cudaStream_t as void*, nullptr =
/// current). On out-of-memory it frees cached blocks and retries once, then stops with a message that
/// gives the request and the statistics.
void* CachingMalloc(size_t bytes, int device, void* stream);
/// Returns a block to the cache (never to the driver).
void CachingFree(void* ptr);
/// Releases every cached, unused block to the driver (cudaFree).
void EmptyCache();
AllocatorStats GetAllocatorStats(int device);

/// Page-locked host memory (cudaHostAlloc), cached by size like device memory.
void* PinnedMalloc(size_t bytes);
void PinnedFree(void* ptr);

}  // namespace tinyddp::cuda

#endif  // TINYDDP_TENSOR_CUDA_ALLOCATOR_H_
