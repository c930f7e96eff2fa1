// The CUDA caching allocator of tensor/cuda_allocator.h.
//
// cudaMalloc and cudaFree are slow (cudaFree also synchronises the whole device), so device memory is
// obtained once and recycled. Every request is rounded up to a size class: a multiple of 512 B up to
// 1 MiB, a multiple of 2 MiB beyond, so that the tensors of one training step map onto a fixed set of
// classes and step N+1 finds exactly the blocks step N freed. Blocks are never split or merged; each is
// one cudaMalloc. Fragmentation stays bounded by the rounding (at most 2 MiB per large block).
//
// Stream awareness. A block belongs to the stream it was allocated for. When it is freed it goes back to
// that stream's pool and can be handed out again at once for the same stream: any later kernel on the
// stream runs after every kernel that used the old tensor. Another stream may take it only once the GPU
// has finished that work, which an event tells us. Instead of recording one event per free (a CUDA call
// on the hot path), a pool records a single "fence" event when another stream first asks for one of its
// blocks; the fence covers every block freed before it was recorded, and those become shareable once it
// has completed. Reuse on the freeing stream, the steady-state case, makes no CUDA call at all.
//
// Out of memory: release every cached block and retry once; then stop with the request and the statistics.
//
// CUDA graphs (tensor/cuda_graph.h). A captured graph keeps the addresses its kernels used, and replays
// write to them long after the tensors of the capture have died. So while a capture is active, requests for
// a stream taking part in it go to the graph's private pool (PyTorch's graph pool): blocks made or reused
// there belong to the graph for its whole life, freed ones return to that pool and are handed out only to
// later requests of the same capture, never to eager code between replays. Inside a capture nothing
// waits or queries events (both are illegal there): a private pool reuses blocks on their own stream only.
// cudaMalloc is allowed during a capture by switching the thread to relaxed capture mode around it, as
// PyTorch's allocator does (the memory is not part of the graph, and outlives every replay). When the
// graph is destroyed its pool's free blocks, and later frees of its blocks, go back to the ordinary pool
// of their stream, where replays already enqueued come first in stream order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/internal/cuda_check.h"
#include "tensor/internal/cuda_context.h"

namespace tinyddp::cuda {
namespace {

constexpr size_t kSmallSize = size_t{1} << 20;   // requests up to 1 MiB...
constexpr size_t kSmallRound = 512;              // ...round up to a multiple of 512 B,
constexpr size_t kLargeRound = size_t{2} << 20;  // larger ones to a multiple of 2 MiB.

size_t SizeClass(size_t bytes) {
  const size_t r = bytes <= kSmallSize ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

struct StreamPool;
struct GraphPool;

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  int device = 0;
  StreamPool* pool = nullptr;  // the stream it was last handed out for; a free returns it there
  bool in_use = false;
  uint64_t free_seq = 0;  // the pool's free counter when this block was freed
};

struct StreamPool {
  cudaStream_t stream = nullptr;
  bool alive = true;                                  // false once the stream has been destroyed
  std::map<size_t, std::vector<Block*>> free_blocks;  // size class -> blocks, oldest free first
  uint64_t free_seq = 0;                              // frees into this pool so far
  cudaEvent_t fence = nullptr;
  bool fence_pending = false;  // recorded, not yet seen complete
  uint64_t fence_seq = 0;      // the fence covers frees numbered <= fence_seq
  uint64_t safe_seq = 0;       // frees numbered <= safe_seq are finished on the GPU
  GraphPool* graph = nullptr;  // set: the part of a CUDA graph's private pool used on `stream`
};

// One CUDA graph's private memory: a StreamPool per stream that allocated during its capture.
struct GraphPool {
  int device = 0;
  unsigned long long capture_id = 0;  // cudaStreamGetCaptureInfo's id of the capture that fills it
  bool capturing = true;              // requests of that capture come here (until EndGraphPool)
  bool released = false;              // the graph is gone: frees go to the ordinary pools
  std::vector<std::unique_ptr<StreamPool>> pools;
  int64_t bytes = 0;  // obtained from cudaMalloc for it (or taken over) and held since
};

struct DeviceState {
  std::vector<std::unique_ptr<StreamPool>> pools;
  std::vector<GraphPool*> capturing;  // graph pools whose capture is active on this device
  AllocatorStats stats;
};

class Allocator {
 public:
  Allocator() : devices_(DeviceCount()) {}

  void* Malloc(size_t bytes, int device, cudaStream_t stream) {
    const size_t size = SizeClass(bytes);
    internal::DeviceGuard guard(device);  // fences may be recorded on `device`'s legacy stream below
    std::lock_guard<std::mutex> lock(mu_);
    DeviceState& state = devices_[device];
    StreamPool* graph_pool = state.capturing.empty() ? nullptr : CapturePoolFor(state, stream);
    StreamPool* pool = graph_pool != nullptr ? graph_pool : PoolFor(state, device, stream);
    Block* block = nullptr;
    auto it = pool->free_blocks.find(size);
    if (it != pool->free_blocks.end() && !it->second.empty()) {
      block = it->second.back();  // the most recently freed: likely still in L2
      it->second.pop_back();
    }
    // Other streams' finished blocks; never during a capture (that takes event queries and records).
    for (size_t i = 0; block == nullptr && graph_pool == nullptr && i < state.pools.size(); ++i) {
      if (state.pools[i].get() != pool) block = TakeFinished(*state.pools[i], size);
    }
    if (block == nullptr) {
      block = NewBlock(state, size, device, bytes, /*capturing=*/graph_pool != nullptr);
      if (graph_pool != nullptr) graph_pool->graph->bytes += static_cast<int64_t>(block->size);
    }
    block->pool = pool;
    block->in_use = true;
    state.stats.allocated_bytes += static_cast<int64_t>(block->size);
    if (state.stats.allocated_bytes > state.stats.peak_allocated_bytes) {
      state.stats.peak_allocated_bytes = state.stats.allocated_bytes;
    }
    return block->ptr;
  }

  void Free(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second->in_use) {
      std::fprintf(stderr,
                   "tinyddp: CachingFree(%p): %s.\n  Hint: a double free, or a pointer from cudaMalloc or "
                   "another allocator.\n",
                   ptr, it == blocks_.end() ? "not allocated by the caching allocator" : "already free");
      std::abort();
    }
    Block* block = it->second.get();
    block->in_use = false;
    DeviceState& state = devices_[block->device];
    state.stats.allocated_bytes -= static_cast<int64_t>(block->size);
    StreamPool* pool = block->pool;
    if (pool->graph != nullptr && pool->graph->released) {
      // Its graph is gone: the block becomes an ordinary block of its stream again.
      pool->graph->bytes -= static_cast<int64_t>(block->size);
      pool = PoolFor(state, block->device, pool->stream);
      block->pool = pool;
    }
    block->free_seq = ++pool->free_seq;
    pool->free_blocks[block->size].push_back(block);
  }

  // --- CUDA graphs (cuda_context.h) ----------------------------------------------------------------

  GraphPool* BeginGraphPool(int device, unsigned long long capture_id) {
    std::lock_guard<std::mutex> lock(mu_);
    graph_pools_.push_back(std::make_unique<GraphPool>());
    GraphPool* graph = graph_pools_.back().get();
    graph->device = device;
    graph->capture_id = capture_id;
    devices_[device].capturing.push_back(graph);
    ++active_captures_;
    return graph;
  }

  void EndGraphPool(GraphPool* graph) {
    std::lock_guard<std::mutex> lock(mu_);
    StopCapturingLocked(graph);
  }

  void ReleaseGraphPool(GraphPool* graph) {
    std::lock_guard<std::mutex> lock(mu_);
    StopCapturingLocked(graph);
    graph->released = true;
    DeviceState& state = devices_[graph->device];
    for (auto& part : graph->pools) {
      StreamPool* home = PoolFor(state, graph->device, part->stream);
      for (auto& entry : part->free_blocks) {
        for (Block* block : entry.second) {
          graph->bytes -= static_cast<int64_t>(block->size);
          block->pool = home;
          block->free_seq = ++home->free_seq;
          home->free_blocks[block->size].push_back(block);
        }
        entry.second.clear();
      }
    }
    // Blocks still held by live tensors come home when they are freed (Free).
  }

  int64_t GraphPoolBytes(GraphPool* graph) {
    std::lock_guard<std::mutex> lock(mu_);
    return graph->bytes;
  }

  void EmptyCache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int d = 0; d < static_cast<int>(devices_.size()); ++d) {
      if (devices_[d].capturing.empty()) ReleaseCached(devices_[d], d);  // no device sync inside a capture
    }
  }

  AllocatorStats Stats(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < 0 || device >= static_cast<int>(devices_.size())) return {};
    return devices_[device].stats;
  }

  void OnStreamDestroy(int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < 0 || device >= static_cast<int>(devices_.size())) return;
    for (auto& pool : devices_[device].pools) {
      if (!pool->alive || pool->stream != stream) continue;
      if (StreamIsCapturing(stream)) continue;  // a record now would land in the graph; the pool stays
      // A last fence behind everything the stream will ever run; its blocks, even those freed later,
      // become shareable when it completes. The pool itself is never matched to a stream again, since a
      // new stream may be given the same handle.
      internal::DeviceGuard guard(device);
      CUDA_CHECK(cudaEventRecord(pool->fence, stream));
      pool->fence_pending = true;
      pool->fence_seq = std::numeric_limits<uint64_t>::max();
      pool->alive = false;
    }
  }

 private:
  void StopCapturingLocked(GraphPool* graph) {
    if (!graph->capturing) return;
    graph->capturing = false;
    std::vector<GraphPool*>& active = devices_[graph->device].capturing;
    active.erase(std::remove(active.begin(), active.end(), graph), active.end());
    --active_captures_;
  }

  static bool StreamIsCapturing(cudaStream_t stream) {
    if (stream == nullptr) return false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return status != cudaStreamCaptureStatusNone;
  }

  // The private pool for a request on `stream` while some capture is active on its device: the part of the
  // pool of the capture `stream` takes part in, made on first use; nullptr when `stream` is not capturing
  // (another thread's request for a stream of its own goes to the ordinary pools).
  StreamPool* CapturePoolFor(DeviceState& state, cudaStream_t stream) {
    if (stream == nullptr) return nullptr;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    if (status != cudaStreamCaptureStatusActive) return nullptr;
    for (GraphPool* graph : state.capturing) {
      if (graph->capture_id != id) continue;
      for (auto& part : graph->pools) {
        if (part->stream == stream) return part.get();
      }
      auto part = std::make_unique<StreamPool>();
      part->stream = stream;
      part->graph = graph;
      graph->pools.push_back(std::move(part));
      return graph->pools.back().get();
    }
    std::fprintf(stderr,
                 "tinyddp: device memory requested on a stream that is recording a CUDA graph which was not begun "
                 "by tinyddp's CudaGraph::Capture (tensor/cuda_graph.h), so its memory would not be kept for the "
                 "graph's replays.\n  Hint: capture through cuda::CudaGraph, not cudaStreamBeginCapture.\n");
    std::abort();
  }

  StreamPool* PoolFor(DeviceState& state, int device, cudaStream_t stream) {
    for (auto& pool : state.pools) {
      if (pool->alive && pool->stream == stream) return pool.get();
    }
    auto pool = std::make_unique<StreamPool>();
    pool->stream = stream;
    internal::DeviceGuard guard(device);
    CUDA_CHECK(cudaEventCreateWithFlags(&pool->fence, cudaEventDisableTiming));
    state.pools.push_back(std::move(pool));
    return state.pools.back().get();
  }

  // A free block of `size` from another stream's pool whose last use has finished on the GPU, or nullptr.
  Block* TakeFinished(StreamPool& pool, size_t size) {
    auto it = pool.free_blocks.find(size);
    if (it == pool.free_blocks.end() || it->second.empty()) return nullptr;
    if (pool.fence_pending) {
      cudaError_t err = cudaEventQuery(pool.fence);
      if (err == cudaSuccess) {
        pool.safe_seq = pool.fence_seq;
        pool.fence_pending = false;
      } else if (err == cudaErrorNotReady) {
        cudaGetLastError();  // an answer, not an error
      } else {
        CUDA_CHECK(err);
      }
    }
    std::vector<Block*>& blocks = it->second;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i]->free_seq <= pool.safe_seq) {
        Block* block = blocks[i];
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
        return block;
      }
    }
    if (!pool.fence_pending && pool.alive && (active_captures_ == 0 || !StreamIsCapturing(pool.stream))) {
      // None finished yet: put a fence behind the latest free so that a later request can share them.
      // Never on a stream that is recording a CUDA graph: the record would become part of the graph.
      CUDA_CHECK(cudaEventRecord(pool.fence, pool.stream));
      pool.fence_pending = true;
      pool.fence_seq = pool.free_seq;
    }
    return nullptr;
  }

  // cudaMalloc of one block. During a capture (`capturing`) the thread is switched to relaxed capture
  // mode around the call, which capture would otherwise refuse, and nothing is released on out-of-memory
  // (releasing waits for the device, which a capture cannot do).
  Block* NewBlock(DeviceState& state, size_t size, int device, size_t requested, bool capturing) {
    internal::DeviceGuard guard(device);
    void* ptr = nullptr;
    cudaError_t err = cudaSuccess;
    if (capturing) {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      err = cudaMalloc(&ptr, size);
      CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));  // back to the capture's own mode
    } else {
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation && !capturing) {
      cudaGetLastError();
      ReleaseCached(state, device);
      err = cudaMalloc(&ptr, size);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_bytes = 0, total_bytes = 0;
        cudaMemGetInfo(&free_bytes, &total_bytes);
        std::fprintf(stderr,
                     "tinyddp: CUDA out of memory on cuda:%d: tried to allocate %.2f MiB (%zu bytes, size class "
                     "%.2f MiB) after releasing every cached block. Live tensors hold %.2f MiB (peak %.2f MiB); "
                     "the cache holds %.2f MiB; the device has %.2f MiB free of %.2f MiB.\n"
                     "  Hint: is another process using the GPU (nvidia-smi)? Otherwise reduce the batch size "
                     "or the model.\n",
                     device, MiB(requested), requested, MiB(size), MiB(state.stats.allocated_bytes),
                     MiB(state.stats.peak_allocated_bytes), MiB(state.stats.reserved_bytes), MiB(free_bytes),
                     MiB(total_bytes));
        std::abort();
      }
    }
    if (err == cudaErrorMemoryAllocation) {  // during a capture
      std::fprintf(stderr,
                   "tinyddp: CUDA out of memory on cuda:%d while recording a CUDA graph: tried to allocate %.2f MiB "
                   "for the graph's private pool. Live tensors hold %.2f MiB; the cache holds %.2f MiB.\n"
                   "  Hint: a graph keeps the memory of every temporary of its step; call EmptyCache() before "
                   "capturing, or reduce the batch size.\n",
                   device, MiB(requested), MiB(state.stats.allocated_bytes), MiB(state.stats.reserved_bytes));
      std::abort();
    }
    CUDA_CHECK(err);
    auto block = std::make_unique<Block>();
    block->ptr = ptr;
    block->size = size;
    block->device = device;
    state.stats.reserved_bytes += static_cast<int64_t>(size);
    state.stats.num_cuda_malloc += 1;
    Block* raw = block.get();
    blocks_.emplace(ptr, std::move(block));
    return raw;
  }

  // cudaFree of every cached block of one device. Waits for the device first: a cached block may still
  // be read by a kernel that was launched before its tensor died.
  void ReleaseCached(DeviceState& state, int device) {
    bool any = false;
    for (auto& pool : state.pools) {
      for (auto& entry : pool->free_blocks) any = any || !entry.second.empty();
    }
    if (!any) return;
    internal::DeviceGuard guard(device);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& pool : state.pools) {
      for (auto& entry : pool->free_blocks) {
        for (Block* block : entry.second) {
          CUDA_CHECK(cudaFree(block->ptr));
          state.stats.reserved_bytes -= static_cast<int64_t>(block->size);
          state.stats.num_cuda_free += 1;
          blocks_.erase(block->ptr);  // destroys the Block
        }
        entry.second.clear();
      }
    }
  }

  std::mutex mu_;
  std::unordered_map<void*, std::unique_ptr<Block>> blocks_;  // every block from cudaMalloc, live or cached
  std::vector<DeviceState> devices_;
  std::vector<std::unique_ptr<GraphPool>> graph_pools_;  // kept after release: a few small records per graph
  int active_captures_ = 0;                              // graph pools capturing, on all devices
};

// Leaked on purpose: tensors held in static variables may be freed after static destructors have run.
Allocator& TheAllocator() {
  static Allocator* allocator = new Allocator();
  return *allocator;
}

}  // namespace

namespace internal {

void OnStreamDestroy(int device, cudaStream_t stream) { TheAllocator().OnStreamDestroy(device, stream); }

void* BeginGraphPool(int device, unsigned long long capture_id) {
  return TheAllocator().BeginGraphPool(device, capture_id);
}
void EndGraphPool(void* pool) { TheAllocator().EndGraphPool(static_cast<GraphPool*>(pool)); }
void ReleaseGraphPool(void* pool) { TheAllocator().ReleaseGraphPool(static_cast<GraphPool*>(pool)); }
int64_t GraphPoolBytes(void* pool) { return TheAllocator().GraphPoolBytes(static_cast<GraphPool*>(pool)); }

}  // namespace internal

void* CachingMalloc(size_t bytes, int device, void* stream) {
  if (device < 0 || device >= DeviceCount()) {
    std::fprintf(stderr, "tinyddp: CachingMalloc(%zu bytes) on cuda:%d, but %d CUDA device(s) are visible.\n", bytes,
                 device, DeviceCount());
    std::abort();
  }
  if (bytes == 0) return nullptr;  // an empty tensor has no data, as in PyTorch
  cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : internal::CurrentStreamHandle(device);
  return TheAllocator().Malloc(bytes, device, s);
}

void CachingFree(void* ptr) {
  if (ptr != nullptr) TheAllocator().Free(ptr);
}

void EmptyCache() {
  if (DeviceCount() > 0) TheAllocator().EmptyCache();
}

AllocatorStats GetAllocatorStats(int device) {
  if (DeviceCount() == 0) return {};
  return TheAllocator().Stats(device);
}

}  // namespace tinyddp::cuda
