// JoinHook: the comm hook that makes DDP average over the ranks that trained this step, not over all of
// them. Part of Join (join.h), the wing for uneven inputs; it attaches at DDP's CommHook seam
// (DdpOptions::comm_hook, dist/ddp/comm_hooks.h) and changes nothing else in DDP.
//
// Why it is needed. Plain DDP averages a bucket over all W ranks: all_reduce with AVG, sum / W. Under Join,
// a rank without a batch still takes part in the step (it shadows, join.h) and contributes gradients of
// exactly zero. With n of the W ranks training, sum / W is then n/W times the mean of the n real
// gradients: the step would shrink as ranks run out of data.
//
// How. Before the bucket travels, each rank multiplies its own gradients by `scale` (W / n, set by Join for
// each step) and hands the bucket to the inner hook, whose AVG divides by W:
//
//     sum over ranks of (g_i * W / n) / W  =  (sum over the n training ranks of g_i) / n
//
// The zeros of the shadowing ranks stay zeros. Scaling before the collective, not dividing after it, is what
// PyTorch does too (its allreduce hook divides by the world size before a SUM; DDP's join mode swaps that
// divisor for the number of ranks still training), and it leaves the inner hook untouched: any hook works
// inside (AllReduceHook by default; bf16 compression, the tracer). When every rank trains, scale is 1 and
// nothing is multiplied: the step is plain DDP's, bit for bit. With JoinOptions::divide_by_initial_world_size
// the scale stays 1 on every step (PyTorch's default: each example keeps the same weight).
//
// The state also counts the buckets the hook has sent, so Join can tell that a rank's training step really
// went through this hook (it is DDP's comm hook, and the step's backward synchronised).
#ifndef TINYDDP_DIST_PARALLEL_JOIN_JOIN_HOOK_H_
#define TINYDDP_DIST_PARALLEL_JOIN_JOIN_HOOK_H_

#include <cstdint>
#include <memory>

#include "dist/ddp/comm_hooks.h"

namespace tinyddp::dist::join {

/// What Join shares with its hook. Written by Join between steps, read by the hook inside backward; both on
/// the training thread.
struct JoinHookState {
  /// Multiplies this rank's gradients before the inner hook averages over the world: W / n this step.
  double scale = 1.0;
  /// Buckets the hook has sent since it was made.
  int64_t buckets_sent = 0;
};

/// The hook: scales each bucket's gradients by state->scale (on the current stream; skipped when it is 1),
/// counts the bucket, then runs `inner` (empty: AllReduceHook). Its path, padding and set-up after bucket
/// builds are the inner hook's. Precondition: state is not null.
CommHook JoinHook(std::shared_ptr<JoinHookState> state, CommHook inner = {});

}  // namespace tinyddp::dist::join

#endif  // TINYDDP_DIST_PARALLEL_JOIN_JOIN_HOOK_H_
