// Ring reduce-scatter on a Gloo context, built from Gloo's point-to-point primitives (unbound buffers):
// Gloo's own reduce-scatter is an old-style algorithm class without timeouts.
//
// The first half of ring allreduce, the algorithm behind NCCL's and Gloo's bandwidth: with n ranks the
// input is n blocks; in each of n-1 steps every rank sends one partially reduced block to its left
// neighbour (rank - 1) and adds the block arriving from its right to its own copy. Rank r ends with block r
// reduced over all ranks, having sent (n-1)/n of the input once: the minimum any reduce-scatter can do.
// The direction and the order of the additions are Gloo's ring all_reduce's (block r starts at rank r-1
// and collects r-2, ..., r): floating-point sums depend on their order, so this is what lets a
// reduce-scatter then all-gather (ZeRO-1's, a wing) give the same bits as Gloo's all_reduce
// over blocks of the same size. In place is allowed: `output` may be block `rank` of `input`.
#ifndef TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_RING_REDUCE_SCATTER_H_
#define TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_RING_REDUCE_SCATTER_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "dist/process_group/process_group.h"
#include "gloo/context.h"

namespace tinyddp::dist {

/// Leaves block `rank` of `input` (context.size blocks the size of `output`), reduced over every rank with
/// `op` (kAvg as kSum: the caller divides), in `output`, which may be that block. `tag` tells this call's
/// messages apart (the same on every rank); `timeout` bounds the whole ring; `scratch` is reused across
/// calls (grown to 2 blocks). Blocks until done; throws gloo::IoException on timeout or transport
/// failure, like Gloo's own collectives.
void RingReduceScatter(gloo::Context& context, const Tensor& input, const Tensor& output, ReduceOp op, uint32_t tag,
                       std::chrono::milliseconds timeout, std::vector<uint8_t>& scratch);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_RING_REDUCE_SCATTER_H_
