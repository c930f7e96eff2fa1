// ZeRO-2's gradient shards (dist/parallel/zero/gradient_shards.h): the hook that stages a bucket, drops its
// gradients and keeps only this rank's averaged block.
#include "dist/parallel/zero/gradient_shards.h"

#include <algorithm>
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

void GradientShards::DrainOne() {
  Staged& oldest = staged_.front();
  // A failure is the reducer's to report: it waits on the same collective.
  oldest.work->SynchronizeStream().IgnoreError();
  if (world_ > 1) staging_bytes_ -= static_cast<int64_t>(oldest.buffer.nbytes());
  staged_.pop_front();
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
  // One bucket staged at a time: this one waits for the previous one's reduce-scatter. The group runs its
  // collectives one after another anyway (Gloo's thread, NCCL's stream), so what waits is only this copy;
  // the reduce-scatter of bucket b still overlaps autograd computing bucket b+1's gradients.
  while (!staged_.empty()) DrainOne();
  const Tensor& block = Block(bucket.index, bucket.numel, bucket.dtype, device);
  Tensor flat = world_ == 1 ? block : Tensor::Empty({padded}, bucket.dtype, device);  // one rank: no staging
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
  for (const autograd::Variable& p : bucket.parameters) p.set_grad(Tensor());
  std::shared_ptr<Work> work = pg.ReduceScatter(block, flat, ReduceOp::kAvg);
  if (world_ > 1) staging_bytes_ += static_cast<int64_t>(flat.nbytes());
  peak_staging_bytes_ = std::max(peak_staging_bytes_, staging_bytes_);
  const cuda::Stream compute = device.is_cuda() ? cuda::Stream::Current(device.index) : cuda::Stream();
  staged_.push_back(Staged{bucket.index, flat, work, compute});
  // At the end of backward the reducer waits for the bucket (in launch order), then this frees what is
  // staged up to it: nothing stays staged between steps. On a GPU only on the stream that staged it: with
  // the optimizer inside backward the reducer may complete a bucket on a side stream (reducer.h), and a
  // buffer freed there would go back to the compute stream's pool while the reduce-scatter still reads it;
  // the next bucket's hook, or the end of backward, frees it on the compute stream instead.
  std::weak_ptr<GradientShards> self = weak_from_this();
  const int index = bucket.index;
  return CommFuture{work, [self, index] {
                      auto shards = self.lock();
                      while (shards && !shards->staged_.empty() && shards->staged_.front().bucket <= index) {
                        const Staged& oldest = shards->staged_.front();
                        const Device on = oldest.buffer.device();
                        if (on.is_cuda() && cuda::Stream::Current(on.index).handle() != oldest.stream.handle()) break;
                        shards->DrainOne();
                      }
                    }};
}

}  // namespace tinyddp::dist::zero
