// GradientShards: ZeRO stage 2's gradients (docs/zero.md), a piece of the ZeRO wing (dist/parallel/zero/).
// ZeRO-1 reduce-scatters each DDP bucket but keeps the whole bucket: N-1 of its N blocks hold this rank's
// own gradients, which nobody reads after the reduce-scatter. ZeRO-2 keeps only what the rank's optimizer
// needs, its averaged block of each bucket, so gradient memory per rank falls from 4P to 4P/N (+ padding)
// plus what is in flight.
//
// Where it attaches: DDP's comm hook, in the coalesced layout (DdpOptions::gradient_as_bucket_view = false),
// where the reducer makes no flat buckets and hands the hook the gradients autograd made. The hook
//   1. copies the bucket's gradients into a staging buffer of the bucket's (padded) size, after waiting for
//      the previous bucket's reduce-scatter, whose staging buffer it frees: one bucket is staged at a time,
//   2. drops the parameters' gradients (GradBucket::parameters; .grad becomes undefined: their memory
//      returns to the allocator),
//   3. reduce-scatters the staging buffer into this rank's block of the bucket, which it keeps (Block()),
//      with the blocks of shard_layout.h, so the sums are ZeRO-1's and DDP's bit for bit,
//   4. at the end of backward, once the reducer has waited for it (CommFuture::then), frees the staging.
// ZeroRedundancyOptimizer::Attach(ddp, factory, shards) then steps each block as ZeRO-1 does. Between steps
// a rank keeps its blocks only (4P/N); during backward also one staged bucket and the fresh gradients of
// the bucket autograd is filling: 1/N plus two buckets in flight, bounded by the bucket size
// (DdpOptions::bucket_cap_bytes, or the largest parameter), not by the model.
//
// What .grad holds: DeepSpeed's ZeRO-2 sets param.grad to None after copying it into its reduction
// buffer and keeps the averaged partition in flat buffers of its own (safe_get_full_grad gathers one);
// FSDP2 gives each parameter a sharded DTensor .grad. tinyddp does as DeepSpeed: after backward the
// parameters have no gradient (a clipping or logging pass must read the blocks, Block(), or gather them);
// this rank's averaged gradients are its blocks.
//
// One rank: its block is the whole bucket, so the gradients are staged straight into it (the reduce-scatter
// over one rank copies nothing) and no staging buffer is made: one rank holds what plain DDP holds.
//
// Why a copy: the reducer's view layout would let autograd write straight into a bucket, but then every
// bucket needs its own buffer until its reduce-scatter has read it (the whole gradient again). Writing into
// a shared staging buffer instead would need a hook *before* a gradient is written, to wait for the
// buffer's previous reduce-scatter; autograd offers hooks after (engine.h). DeepSpeed copies too (its
// "IPG" bucket). The copy is one pass over each gradient, on the compute stream.
// Streams: the copies run on the current (compute) stream; before freeing a staging buffer the hook orders
// the compute stream after its reduce-scatter (an event wait on GPU; on CPU the thread waits for Gloo), so
// the caching allocator hands the memory to later kernels of that stream only once the collective read it.
// Not thread-safe: the training thread.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_GRADIENT_SHARDS_H_
#define TINYDDP_DIST_PARALLEL_ZERO_GRADIENT_SHARDS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "dist/ddp/comm_hooks.h"
#include "dist/parallel/zero/shard_layout.h"
#include "dist/process_group/process_group.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::zero {

class GradientShards : public std::enable_shared_from_this<GradientShards> {
 public:
  /// For buckets reduced over `pg` (its size and rank fix the blocks; Gloo's chunks or NCCL's aligned
  /// blocks, as ZeRO-1's: BlockSizeFor).
  static std::shared_ptr<GradientShards> Create(const ProcessGroup& pg);
  static std::shared_ptr<GradientShards> Create(const ProcessGroup& pg, BlockSize size);

  /// The comm hook for DdpOptions::comm_hook, with DdpOptions::gradient_as_bucket_view = false: each bucket
  /// staged, its gradients dropped, reduce-scattered into Block(). Path "NCCL reduce_scatter to shards" or
  /// "Gloo reduce_scatter to shards". It holds this object.
  CommHook Hook();
  /// Elements of one rank's block of a bucket of `numel` elements of `element_size` bytes.
  int64_t ShardNumel(int64_t numel, int64_t element_size) const;
  /// This rank's averaged gradient block of bucket `bucket`, [ShardNumel(numel, dtype size)]: made (zeros)
  /// the first time it is asked for at that size, and kept; the hook reduce-scatters into it.
  const Tensor& Block(int bucket, int64_t numel, DType dtype, Device device);

  /// Bytes of the blocks this rank keeps; of the bucket staged now (0 between steps), and the largest staged.
  int64_t block_bytes() const;
  int64_t staging_bytes() const { return staging_bytes_; }
  int64_t peak_staging_bytes() const { return peak_staging_bytes_; }
  int world() const { return world_; }

 private:
  GradientShards(int world, int rank, BlockSize size) : world_(world), rank_(rank), size_(size) {}
  CommFuture Run(ProcessGroup& pg, GradBucket& bucket);
  // Waits for the oldest reduce-scatter in flight (compute stream ordered after it) and frees its staging.
  void DrainOne();

  const int world_, rank_;
  const BlockSize size_;
  std::vector<Tensor> blocks_;  // by bucket index
  struct Staged {
    int bucket = 0;
    Tensor buffer;               // the bucket's gradients, padded
    std::shared_ptr<Work> work;  // the reduce-scatter reading it
    cuda::Stream stream;         // GPU: the (compute) stream it was staged on, whose pool it returns to
  };
  std::deque<Staged> staged_;  // in flight, oldest first; at most one
  int64_t staging_bytes_ = 0, peak_staging_bytes_ = 0;
};

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_GRADIENT_SHARDS_H_
