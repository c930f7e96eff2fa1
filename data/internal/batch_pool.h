// BatchPool: recycled buffers for the DataLoader's batches, so a steady-state epoch creates no new ones.
//
// A slot holds one batch in a single Storage on the pool's device: inputs float32 [capacity, D], then
// (64-byte aligned) labels int64 [capacity]; one block means one host-to-device copy per batch.
// Lend() wraps a slot as a Batch whose tensors own a small Storage over the slot's bytes; when the last
// of those tensors dies, the slot goes back to the pool. So reuse follows the consumer's real use: a
// trainer that keeps a batch keeps its slot, and the pool simply grows (the producer never blocks on it).
// For a CUDA pool the return also records `released` on the device's current stream, i.e. after every
// kernel the consumer queued on that batch; the producer makes its copy stream wait for that event
// before it overwrites the slot, which orders the reuse on the GPU without a host synchronisation.
// Internal to data/ (used by data_loader.cc). Thread-safe.
#ifndef TINYDDP_DATA_INTERNAL_BATCH_POOL_H_
#define TINYDDP_DATA_INTERNAL_BATCH_POOL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "data/dataset.h"
#include "tensor/storage.h"
#include "tensor/stream.h"

namespace tinyddp::data::internal {

/// Byte layout of a batch buffer of `capacity` rows of `input_size` floats followed by the labels.
struct BatchLayout {
  int64_t capacity = 0;
  int64_t input_size = 0;
  size_t labels_offset() const { return (capacity * input_size * sizeof(float) + 63) / 64 * 64; }
  size_t nbytes() const { return labels_offset() + capacity * sizeof(int64_t); }
  /// Views of the first `rows` rows of a buffer with this layout.
  Batch View(const std::shared_ptr<Storage>& storage, int64_t rows) const;
};

struct BatchSlot {
  std::shared_ptr<Storage> storage;  // the bytes, on the pool's device
  cuda::Event ready;                 // CUDA: recorded on the copy stream once the batch has landed here
  cuda::Event released;              // CUDA: recorded on the consumer's stream when the batch died
};

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  /// Precondition: layout.capacity > 0; a CUDA `device` exists.
  static std::shared_ptr<BatchPool> Create(Device device, BatchLayout layout);

  /// The free slot released longest ago (its GPU work most likely done), or a new one if none is free.
  std::shared_ptr<BatchSlot> Acquire();
  /// The first `rows` rows of `slot` as a Batch; the slot returns to the pool when the batch's tensors
  /// are all gone.
  Batch Lend(std::shared_ptr<BatchSlot> slot, int64_t rows);

  /// Slots created so far (for tests: a steady state stops creating them).
  int64_t num_slots() const;
  const BatchLayout& layout() const { return layout_; }

 private:
  BatchPool(Device device, BatchLayout layout) : device_(device), layout_(layout) {}
  void Return(std::shared_ptr<BatchSlot> slot);

  const Device device_;
  const BatchLayout layout_;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<BatchSlot>> free_;  // oldest release first
  int64_t num_slots_ = 0;
};

}  // namespace tinyddp::data::internal

#endif  // TINYDDP_DATA_INTERNAL_BATCH_POOL_H_
