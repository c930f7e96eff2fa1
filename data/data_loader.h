// DataLoader: turns this rank's sampler indices into batches, prepared ahead on a background thread.
//
// Sits on top of a Dataset (dataset.h) and a DistributedSampler (distributed_sampler.h); the training
// loop (examples/ddp_mlp.cc) pulls batches from it:
//
//   auto loader = DataLoader::Create(dataset, sampler, {.batch_size = 64, .device = Device::CUDA(rank)});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     for ((*loader)->Reset(epoch); std::optional<Batch> batch = (*loader)->Next();) {
//       ... forward(batch->inputs), loss(batch->labels) ...
//     }
//     if (!(*loader)->status().ok()) return (*loader)->status();
//   }
//
// Order: batch k of an epoch holds sampler indices [k*B, (k+1)*B), always, whatever the prefetch depth;
// the last batch is smaller unless drop_last. One worker thread gathers batch k+1.. while the trainer
// runs batch k, keeping at most `prefetch_depth` finished batches in a bounded queue.
//
// CUDA (device = cuda:N): the worker gathers into page-locked host buffers (a ring of depth+1, reused)
// and copies each batch to the GPU with one cudaMemcpyAsync on a side stream, then records an event.
// Next() makes the device's current stream wait on that event, so the host never synchronises and the
// copy of batch k+1 overlaps the compute of batch k. A host buffer is refilled only after the copy that
// read it has completed (checked with an event on the producer side). Device buffers are recycled as the
// batches handed out die (internal/batch_pool.h), so a steady-state epoch allocates no new buffers
// (only the small tensor handles of each batch).
//
// Contract for CUDA batches: use them on the device's current stream (or make your stream wait on it);
// buffer reuse is ordered after the work queued there when the batch's last tensor is dropped.
//
// Static buffers (CUDA graphs, tensor/cuda_graph.h): a recorded training step reads its inputs from the
// addresses it was recorded with, so instead of new tensors each batch must land in the same two buffers.
// NextInto does that: the batch, already on the device, is copied into them on this loader's copy stream,
// after the previous step has read them and before the next one does (events on both sides, no host wait).
// Thread-safety: one consumer thread calls Reset/Next; the worker is internal.
#ifndef TINYDDP_DATA_DATA_LOADER_H_
#define TINYDDP_DATA_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "tensor/device.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::data {

namespace internal {
class BatchPool;
struct BatchSlot;
}  // namespace internal

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool drop_last = false;          // drop a last batch smaller than batch_size
  int prefetch_depth = 2;          // finished batches kept ready ahead of the consumer (>= 1)
  Device device = Device::CPU();   // where batches are delivered
  absl::Duration timeout = absl::Minutes(5);  // longest Next() waits for the worker before failing
};

class DataLoader {
 public:
  /// InvalidArgument for batch_size < 1, prefetch_depth < 1, or a sampler built for a different dataset
  /// size; FailedPrecondition for a CUDA device that does not exist (or a build without CUDA).
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const Dataset> dataset,
                                                            DistributedSampler sampler,
                                                            const DataLoaderOptions& options);
  /// Stops and joins the worker (never hangs, whatever the consumer did) and waits for in-flight copies.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts epoch `epoch`: sampler.SetEpoch(epoch), then the worker begins gathering. Abandons any
  /// batches left from the previous epoch (stopping early is fine).
  void Reset(int64_t epoch);
  /// The next batch of the epoch, or nullopt at its end, or on an error (then status() says which:
  /// a dataset error from the worker, a timeout, or Next() before Reset()).
  std::optional<Batch> Next();
  /// The next batch copied into `inputs` (float32 [batch_size, D]) and `labels` (int64 [batch_size]), fixed
  /// buffers on the loader's device that a recorded step reads (above). Returns the rows copied: batch_size,
  /// or fewer for a smaller last batch (only the first rows are written), or 0 at the end of the epoch or on
  /// an error (status() says which; InvalidArgument for buffers of the wrong shape, dtype or device). On CUDA
  /// the copy runs on the loader's copy stream, ordered after the work already queued on the device's
  /// current stream and before anything queued there after this call; the host does not wait.
  int64_t NextInto(Tensor& inputs, Tensor& labels);
  /// OK unless the current epoch ended early because of an error.
  absl::Status status() const { return status_; }

  /// Batches per epoch on this rank: ceil(num_samples / B), or floor with drop_last.
  int64_t num_batches() const;
  const DistributedSampler& sampler() const { return sampler_; }
  const DataLoaderOptions& options() const { return options_; }
  /// Device buffers created so far (tests check the steady state stops creating them).
  int64_t num_buffers_created() const;

 private:
  // A finished batch, or the worker's error (then batch is empty), in production order.
  struct Item {
    Batch batch;
    std::shared_ptr<internal::BatchSlot> slot;
    absl::Status status;
  };
  // A page-locked staging buffer; `copied` completes when the copy that last read it has.
  struct HostBuffer {
    std::shared_ptr<Storage> storage;
    cuda::Event copied;
  };

  DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, const DataLoaderOptions& options);
  void StopWorker();
  void Work(std::vector<int64_t> indices);
  absl::StatusOr<Item> Produce(absl::Span<const int64_t> indices, int64_t batch_number);
  bool WaitUntilCopied(const cuda::Event& event);  // false if asked to stop meanwhile
  void Push(Item item);
  // The queue half of Next(): the next item, or nullopt at the end of the epoch or on an error (status_).
  std::optional<Item> Pop();

  const std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  const DataLoaderOptions options_;
  std::shared_ptr<internal::BatchPool> pool_;
  cuda::Stream copy_stream_;             // CUDA only: where host-to-device copies run
  std::vector<HostBuffer> host_ring_;    // CUDA only: touched by the worker thread alone
  cuda::Event static_free_, static_ready_;  // CUDA, NextInto: the buffers' readers are queued; the copy landed

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable ready_cv_;     // the consumer waits for an item
  std::condition_variable room_cv_;      // the worker waits for queue space
  std::deque<Item> queue_;               // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  bool worker_done_ = false;             // guarded by mu_: every item of the epoch is queued
  bool started_ = false;                 // consumer-side: Reset has been called
  int64_t next_batch_ = 0;               // consumer-side: batch number Next() returns next
  absl::Status status_;                  // consumer-side
};

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_DATA_LOADER_H_
