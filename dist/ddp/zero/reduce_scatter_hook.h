// ZeRO-1's comm hook: each bucket of gradients is reduce-scattered instead of all-reduced. The hook seam
// is DDP's (comm_hooks.h): it runs inside backward the moment a bucket is ready, so reduce-scatters
// overlap the rest of backward exactly as DDP's all_reduces do. What follows it (the optimizer step of the
// rank's shard, the all-gather of the parameters) is zero_optimizer.h's.
//
// Bytes on the wire: a ring reduce-scatter sends (N-1)/N of the bucket from each rank, half of a ring
// all_reduce; the all-gather of the parameters after the step sends the other half. One all_reduce's
// worth in all (less under bf16, whose all-gather moves 2-byte compute copies).
#ifndef TINYDDP_DIST_DDP_ZERO_REDUCE_SCATTER_HOOK_H_
#define TINYDDP_DIST_DDP_ZERO_REDUCE_SCATTER_HOOK_H_

#include "dist/ddp/comm_hooks.h"

namespace tinyddp::dist::zero {

/// ReduceScatter(ReduceOp::kAvg) of the bucket's flat buffer, in place: block `rank` of the buffer
/// (shard_layout.h) ends holding the average over ranks of that block; the other blocks keep this rank's
/// own gradients, which nobody reads. Path: "NCCL reduce_scatter" or "Gloo reduce_scatter".
/// Preconditions: the gradient_as_bucket_view layout, buckets padded to a multiple of the group's size
/// (ReducerOptions::padded_numel = PaddedNumel).
CommHook ReduceScatterHook();

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_DDP_ZERO_REDUCE_SCATTER_HOOK_H_
