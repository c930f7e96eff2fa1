// The host-side helpers of cuda_common.cuh: SM counts, occupancy, and per-stream scratch memory.
// Each is a small cache filled on first use, so the launch path of a steady-state step only reads it.
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/internal/cuda_common.cuh"

namespace tinyddp::cuda::internal {

int SmCount(int device) {
  static const std::vector<int>* counts = [] {
    auto* v = new std::vector<int>(DeviceCount());
    for (int d = 0; d < static_cast<int>(v->size()); ++d) {
      CUDA_CHECK(cudaDeviceGetAttribute(&(*v)[d], cudaDevAttrMultiProcessorCount, d));
    }
    return v;
  }();
  return (*counts)[device];
}

int ResidentBlocks(const void* kernel, int threads, int device) {
  // Keyed by kernel and block size; the per-SM figure depends on the GPU model, which is the same for
  // every device of one machine, and is multiplied by the device's own SM count.
  struct Key {
    const void* kernel;
    int threads;
    bool operator==(const Key& o) const { return kernel == o.kernel && threads == o.threads; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.kernel) ^ (static_cast<size_t>(k.threads) << 1);
    }
  };
  static std::mutex mu;
  static auto* per_sm = new std::unordered_map<Key, int, KeyHash>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = per_sm->find(Key{kernel, threads});
  if (it == per_sm->end()) {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
    it = per_sm->emplace(Key{kernel, threads}, blocks < 1 ? 1 : blocks).first;
  }
  return it->second * SmCount(device);
}

void* StreamScratch(ScratchKind kind, int device, cudaStream_t stream, size_t bytes, bool* fresh) {
  struct Entry {
    ScratchKind kind;
    int device;
    cudaStream_t stream;
    void* ptr;
    size_t bytes;
  };
  static std::mutex mu;
  static auto* entries = new std::vector<Entry>();  // a handful: kinds x devices x streams
  std::lock_guard<std::mutex> lock(mu);
  if (fresh != nullptr) *fresh = true;
  for (Entry& e : *entries) {
    if (e.kind != kind || e.device != device || e.stream != stream) continue;
    if (e.bytes >= bytes) {
      if (fresh != nullptr) *fresh = false;
      return e.ptr;
    }
    // Too small: give the old block back. Freed for this stream, so the allocator hands it out again
    // only to work queued after the kernels that still use it.
    CachingFree(e.ptr);
    e.ptr = CachingMalloc(bytes, device, stream);
    e.bytes = bytes;
    return e.ptr;
  }
  entries->push_back(Entry{kind, device, stream, CachingMalloc(bytes, device, stream), bytes});
  return entries->back().ptr;
}

ReduceScratch GetReduceScratch(int device, cudaStream_t stream, int64_t num_partials) {
  // Layout: [counter, padded to 16 bytes][num_partials doubles]. Grown in steps of 4096 partials so a
  // changing batch size does not reallocate every time; a new block gets its counter zeroed in stream
  // order, and every kernel leaves it at zero when it finishes.
  const int64_t capacity = (num_partials + 4095) / 4096 * 4096;
  const size_t bytes = 16 + static_cast<size_t>(capacity) * sizeof(double);
  bool fresh = false;
  void* base = StreamScratch(ScratchKind::kReduce, device, stream, bytes, &fresh);
  if (fresh) CUDA_CHECK(cudaMemsetAsync(base, 0, 16, stream));
  return ReduceScratch{static_cast<unsigned int*>(base), reinterpret_cast<double*>(static_cast<char*>(base) + 16)};
}

}  // namespace tinyddp::cuda::internal
