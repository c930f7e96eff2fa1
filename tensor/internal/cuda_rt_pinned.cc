// Pinned (page-locked) host memory for tensor/cuda_allocator.h: PinnedMalloc and PinnedFree.
//
// Only page-locked memory lets cudaMemcpyAsync copy between host and device without blocking the host,
// which is what lets a data loader stage batch N+1 while the GPU trains on batch N. cudaHostAlloc is
// even slower than cudaMalloc (it maps the pages for every GPU), so buffers are cached by size class.
//
// A freed buffer may still be the source or target of a copy in flight. At free time an event is
// recorded on the current stream of the current device, where tinyddp issues its copies (Tensor::To),
// and the buffer is handed out again only after that event has completed. Copies issued on another
// stream must be waited for before the buffer's tensor dies.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/internal/cuda_check.h"
#include "tensor/internal/cuda_context.h"

namespace tinyddp::cuda {
namespace {

// The same size classes as device memory (cuda_rt_allocator.cc).
size_t SizeClass(size_t bytes) {
  const size_t r = bytes <= (size_t{1} << 20) ? size_t{512} : (size_t{2} << 20);
  return (bytes + r - 1) / r * r;
}

struct PinnedBlock {
  size_t size = 0;
  bool in_use = false;
  cudaEvent_t done = nullptr;  // recorded at free; the last copies using the block precede it
  int event_device = -1;       // events belong to one device
};

class PinnedCache {
 public:
  void* Malloc(size_t bytes) {
    const size_t size = SizeClass(bytes == 0 ? 1 : bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      std::vector<void*>& ptrs = it->second;
      for (size_t i = 0; i < ptrs.size(); ++i) {  // oldest first: the likeliest to be finished
        void* ptr = ptrs[i];
        if (!CopiesFinished(blocks_[ptr])) continue;
        ptrs.erase(ptrs.begin() + static_cast<std::ptrdiff_t>(i));
        blocks_[ptr].in_use = true;
        return ptr;
      }
    }
    void* ptr = nullptr;
    cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::fprintf(stderr,
                   "tinyddp: PinnedMalloc(%zu bytes): the system refused to page-lock more host memory.\n"
                   "  Hint: lower the data loader's prefetch depth, or check `ulimit -l` and free RAM.\n",
                   bytes);
      std::abort();
    }
    CUDA_CHECK(err);
    PinnedBlock& block = blocks_[ptr];
    block.size = size;
    block.in_use = true;
    return ptr;
  }

  void Free(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second.in_use) {
      std::fprintf(stderr, "tinyddp: PinnedFree(%p): %s (a double free?).\n", ptr,
                   it == blocks_.end() ? "not allocated by PinnedMalloc" : "already free");
      std::abort();
    }
    PinnedBlock& block = it->second;
    const int device = CurrentDevice();
    internal::DeviceGuard guard(device);
    if (block.done != nullptr && block.event_device != device) {
      CUDA_CHECK(cudaEventDestroy(block.done));
      block.done = nullptr;
    }
    if (block.done == nullptr) {
      CUDA_CHECK(cudaEventCreateWithFlags(&block.done, cudaEventDisableTiming));
      block.event_device = device;
    }
    CUDA_CHECK(cudaEventRecord(block.done, internal::CurrentStreamHandle(device)));
    block.in_use = false;
    free_[block.size].push_back(ptr);
  }

 private:
  static bool CopiesFinished(const PinnedBlock& block) {
    if (block.done == nullptr) return true;
    cudaError_t err = cudaEventQuery(block.done);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();  // an answer, not an error
      return false;
    }
    CUDA_CHECK(err);
    return true;
  }

  std::mutex mu_;
  std::unordered_map<void*, PinnedBlock> blocks_;  // every buffer from cudaHostAlloc
  std::map<size_t, std::vector<void*>> free_;      // size class -> cached buffers, oldest free first
};

// Leaked on purpose, like the device allocator: buffers may be freed during static destruction.
PinnedCache& ThePinnedCache() {
  static PinnedCache* cache = new PinnedCache();
  return *cache;
}

}  // namespace

void* PinnedMalloc(size_t bytes) {
  // Without a GPU there is nothing to page-lock for: ordinary aligned host memory behaves the same.
  if (DeviceCount() == 0) return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  return ThePinnedCache().Malloc(bytes);
}

void PinnedFree(void* ptr) {
  if (ptr == nullptr) return;
  if (DeviceCount() == 0) {
    std::free(ptr);
    return;
  }
  ThePinnedCache().Free(ptr);
}

}  // namespace tinyddp::cuda
