// BatchPool: slots handed out as Batch tensors and taken back when those tensors die.
#include "data/internal/batch_pool.h"

namespace tinyddp::data::internal {

Batch BatchLayout::View(const std::shared_ptr<Storage>& storage, int64_t rows) const {
  return Batch{Tensor::FromStorage(storage, 0, {rows, input_size}, DType::kFloat32),
               Tensor::FromStorage(storage, labels_offset(), {rows}, DType::kInt64)};
}

std::shared_ptr<BatchPool> BatchPool::Create(Device device, BatchLayout layout) {
  return std::shared_ptr<BatchPool>(new BatchPool(device, layout));
}

std::shared_ptr<BatchSlot> BatchPool::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      std::shared_ptr<BatchSlot> slot = std::move(free_.front());
      free_.pop_front();
      return slot;
    }
    ++num_slots_;
  }
  auto slot = std::make_shared<BatchSlot>();
  slot->storage = AllocateStorage(layout_.nbytes(), device_);
  if (device_.is_cuda()) {
    // The caching allocator may hand out a block whose previous owner's kernels are still queued on the
    // current stream (it is safe for work on that stream). Our copy runs on another stream, so it must
    // wait for that point too: mark it as if the block had just been released there.
    slot->released.Record(cuda::Stream::Current(device_.index));
  }
  return slot;
}

Batch BatchPool::Lend(std::shared_ptr<BatchSlot> slot, int64_t rows) {
  Storage* bytes = slot->storage.get();
  // The lent Storage does not own the bytes: its "deleter" hands the slot back. It holds the pool and
  // the slot, so a batch that outlives the DataLoader keeps its memory valid.
  auto lent = std::make_shared<Storage>(
      bytes->data(), bytes->nbytes(), device_,
      [pool = shared_from_this(), slot = std::move(slot)](void*) mutable { pool->Return(std::move(slot)); });
  return layout_.View(lent, rows);
}

void BatchPool::Return(std::shared_ptr<BatchSlot> slot) {
  if (device_.is_cuda()) {
    // Whatever the consumer queued on this batch sits on the device's current stream (the documented
    // contract of DataLoader); the next copy into this slot waits for this point.
    slot->released.Record(cuda::Stream::Current(device_.index));
  }
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(slot));
}

int64_t BatchPool::num_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_slots_;
}

}  // namespace tinyddp::data::internal
