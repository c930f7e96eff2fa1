// ShadowBackward: how a rank that has no batch this step still takes part in DDP's step, so that the ranks
// that do have one are not left waiting in a collective nobody else joins (part of Join, join.h).
//
// A DDP step is more collectives than one all_reduce per bucket, and which ones depends on the step:
//   * the second Forward broadcasts rank 0's gradient order and rebuilds the buckets (once per run);
//   * the backward sends every bucket through the comm hook, in bucket order, each of its own size;
//   * find_unused_parameters adds an all_reduce of the map of used parameters after the buckets;
//   * a bucket-reduced callback adds its own (ZeRO-1's all-gathers), fused optimizers step per bucket.
// A rank that wants to match all of that exactly must issue the same calls in the same order with the same
// sizes. Rebuilding that list outside DDP (PyTorch's join hook all-reduces zero buckets in the reducer's
// order) would mean copying the reducer's rules, and reaching parts DDP does not expose (the rebuild is the
// Reducer's, behind DDP's Forward). So this file does not imitate DDP's step: it takes one, through DDP
// itself, with a contribution of exactly zero:
//
//     module.ZeroGrad();
//     out = ddp.Forward(placeholder_input);        // the rebuild's broadcast, if due; arms the reducer
//     autograd::Backward(out, /*seed=*/zeros);     // every bucket through the comm hook, in DDP's order
//
// A zero seed makes every gradient of this backward exactly 0 (each is a product with the zero seed; the
// placeholder's values only need to keep the forward finite: a row of zeros is the usual choice). So this
// rank adds nothing to the sums, and the collectives match by construction: they come from the same code
// that the training ranks run. The price is one forward and backward of the placeholder (one row), small
// beside the wait this rank would otherwise spend idle.
#ifndef TINYDDP_DIST_PARALLEL_JOIN_SHADOW_STEP_H_
#define TINYDDP_DIST_PARALLEL_JOIN_SHADOW_STEP_H_

#include "absl/status/status.h"
#include "autograd/variable.h"
#include "dist/ddp/ddp.h"

namespace tinyddp::dist::join {

/// Runs the zero-contribution step above on `ddp`: afterwards every .grad holds what the ranks that trained
/// sent, averaged as the comm hook averages. Collective (it is DDP's step). Returns ddp.status() when it
/// already failed (no collective is issued then), FailedPrecondition inside NoSync (a backward there
/// communicates nothing while the training ranks' does: Join does not support gradient accumulation), and
/// the step's communication error, if any (ddp.status() afterwards).
absl::Status ShadowBackward(DistributedDataParallel& ddp, const autograd::Variable& placeholder_input);

}  // namespace tinyddp::dist::join

#endif  // TINYDDP_DIST_PARALLEL_JOIN_SHADOW_STEP_H_
