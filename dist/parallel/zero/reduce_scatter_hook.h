// ZeRO-1's comm hook: each bucket of gradients is padded to whole blocks and reduce-scattered instead of
// all-reduced. It is where ZeRO-1 attaches to DDP first (DdpOptions::comm_hook, dist/ddp/comm_hooks.h): the
// hook runs inside backward the moment a bucket is ready, so reduce-scatters overlap the rest of backward
// exactly as DDP's all_reduces do, and its padded_numel tells the reducer how large to make each flat
// bucket. What follows it (the optimizer step of the rank's shard, the all-gather of the parameters) is
// zero_optimizer.h's, attached after DDP is created.
//
// Bytes on the wire: a ring reduce-scatter sends (N-1)/N of the bucket from each rank, half of a ring
// all_reduce; the all-gather of the parameters after the step sends the other half. One all_reduce's
// worth in all (less under bf16, whose all-gather moves 2-byte compute copies).
#ifndef TINYDDP_DIST_PARALLEL_ZERO_REDUCE_SCATTER_HOOK_H_
#define TINYDDP_DIST_PARALLEL_ZERO_REDUCE_SCATTER_HOOK_H_

#include "dist/ddp/comm_hooks.h"
#include "dist/parallel/zero/shard_layout.h"
#include "dist/process_group/process_group.h"

namespace tinyddp::dist::zero {

/// The hook for DdpOptions::comm_hook under ZeRO-1, for buckets reduced over `pg` (its size fixes the
/// blocks): padded_numel pads each bucket to pg.size() whole blocks (shard_layout.h's PaddedNumel, with
/// BlockSizeFor(pg.backend_name()): Gloo's chunks, or aligned for NCCL), and run reduce-scatters the
/// bucket's flat buffer with ReduceOp::kAvg, in place: block `rank` of the buffer ends holding the average
/// over ranks of that block; the other blocks keep this rank's own gradients, which nobody reads.
/// Path: "NCCL reduce_scatter" or "Gloo reduce_scatter". Precondition: gradient_as_bucket_view.
CommHook ReduceScatterHook(const ProcessGroup& pg);
/// The same with blocks sized as `size` says, whatever the backend (a test runs NCCL's on Gloo).
CommHook ReduceScatterHook(const ProcessGroup& pg, BlockSize size);

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_REDUCE_SCATTER_HOOK_H_
