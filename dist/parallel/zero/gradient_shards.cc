// ZeRO-2's gradient shards (dist/parallel/zero/gradient_shards.h): the hook that stages a bucket, drops its
// gradients and keeps only this rank's averaged block.
#include "dist/parallel/zero/gradient_shards.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::dist::zero {

std::shared_ptr<GradientShards> GradientShards::Create(const ProcessGroup& pg) {
  return Create(pg, BlockSizeFor(pg.backend_name()));
}

std::shared_ptr<GradientShards> GradientShards::Create(const ProcessGroup& pg, BlockSize size) {
  return std::shared_ptr<GradientShards>(new GradientShards(pg.size(), pg.rank(), size));
}

int64_t GradientShards::ShardNumel(int64_t numel, int64_t element_size) const {
  return zero::ShardNumel(numel, world_, element_size, size_);
}

const Tensor& GradientShards::Block(int bucket, int64_t numel, DType dtype, Device device) {
  if (static_cast<int>(blocks_.size()) <= bucket) blocks_.resize(bucket + 1);
  const int64_t shard = ShardNumel(numel, static_cast<int64_t>(DTypeSize(dtype)));
  Tensor& block = blocks_[bucket];
  // After DDP's one-time bucket rebuild a bucket index may hold other parameters: a new size, a new block.
  if (!block.defined() || block.numel() != shard || block.dtype() != dtype || block.device() != device) {
    block = Tensor::Zeros({shard}, dtype, device);
  }
  return block;
}

int64_t GradientShards::block_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& block : blocks_) bytes += block.defined() ? static_cast<int64_t>(block.nbytes()) : 0;
  return bytes;
}

int64_t GradientShards::staging_bytes() const {
  int64_t bytes = 0;
  for (const Staging& s : staging_) bytes += s.buffer.defined() ? static_cast<int64_t>(s.buffer.nbytes()) : 0;
  return bytes;
}

CommHook GradientShards::Hook() {
  CommHook hook;
  std::shared_ptr<GradientShards> self = shared_from_this();
  hook.run = [self](ProcessGroup& pg, GradBucket& bucket) { return self->Run(pg, bucket); };
  hook.path = [](const ProcessGroup& pg, const GradBucket&) {
    const std::string backend = pg.backend_name();
    if (backend == "nccl") return "NCCL reduce_scatter to shards";
    if (backend == "gloo") return "Gloo reduce_scatter to shards";
    return "reduce_scatter to shards";
  };
  // ZeRO-1's padding, for a reader asking the hook (ZeroRedundancyOptimizer::Attach); the coalesced layout
  // the hook needs makes no flat buckets, so the reducer itself never pads.
  const int world = world_;
  const BlockSize size = size_;
  hook.padded_numel = [world, size](int64_t numel, int64_t element_size) {
    return PaddedNumel(numel, world, element_size, size);
  };
  return hook;
}

CommFuture GradientShards::Run(ProcessGroup& pg, GradBucket& bucket) {
  TINYDDP_CHECK_OP(!bucket.buffer.defined() && !bucket.gradients.empty(), "ZeRO-2 hook", "bucket ", bucket.index,
                   " is a flat buffer; hint: ZeRO-2 keeps no flat buckets, so create DDP with "
                   "DdpOptions::gradient_as_bucket_view = false and comm_hook = GradientShards::Hook()");
  const Device device = bucket.gradients[0].device();
  const int64_t shard = ShardNumel(bucket.numel, static_cast<int64_t>(DTypeSize(bucket.dtype)));
  const int64_t padded = shard * world_;
  Staging& staging = staging_[bucket.index % 2];
  if (staging.in_flight != nullptr) {
    // The bucket two before this one may still be reduce-scattering out of this buffer: order the compute
    // stream (CPU: the thread) after it. A failure there is the reducer's to report (it waits on it too).
    staging.in_flight->SynchronizeStream().IgnoreError();
    staging.in_flight.reset();
  }
  if (!staging.buffer.defined() || staging.buffer.numel() < padded || staging.buffer.dtype() != bucket.dtype ||
      staging.buffer.device() != device) {
    staging.buffer = Tensor::Empty({padded}, bucket.dtype, device);  // grows to the largest bucket, then stays
  }
  Tensor flat = staging.buffer.Rows(0, padded);
  int64_t offset = 0;
  for (Tensor& grad : bucket.gradients) {
    Tensor into = flat.Rows(offset, offset + grad.numel());
    ops::CopyInto(into, grad.Flatten());
    offset += grad.numel();
    grad = Tensor();  // the reducer's reference
  }
  if (padded > offset) {
    Tensor padding = flat.Rows(offset, padded);
    ops::Fill(padding, 0.0);
  }
  // The parameters' references: their gradients' memory goes back to the allocator now (on GPU, reusable by
  // the compute stream, which is ordered after the copies above).
  if (reducer_ != nullptr) {
    for (const autograd::Variable& p : reducer_->BucketParameters(bucket.index)) p.set_grad(Tensor());
  }
  const Tensor& block = Block(bucket.index, bucket.numel, bucket.dtype, device);
  staging.in_flight = pg.ReduceScatter(block, flat, ReduceOp::kAvg);
  return CommFuture{staging.in_flight, nullptr};
}

}  // namespace tinyddp::dist::zero
