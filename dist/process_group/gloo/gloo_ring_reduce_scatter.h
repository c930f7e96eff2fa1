// Ring reduce-scatter on a Gloo context, built from Gloo's point-to-point primitives (unbound buffers).
//
// Gloo ships allreduce, broadcast, allgather, reduce and barrier with timeouts, but its only
// reduce-scatter is an old-style algorithm class without them. This is the first half of ring allreduce,
// the algorithm behind NCCL's and Gloo's bandwidth: with n ranks, the input is n blocks; in each of n-1
// steps every rank sends one partially reduced block to its left neighbour (rank - 1) and adds the block
// arriving from its right neighbour to its own copy. After step n-2, rank r holds block r reduced over all
// ranks. Each rank sends (n-1)/n of the input once: the minimum any reduce-scatter can do.
//
// The direction and the order of the additions are Gloo's own ring all_reduce's: block r starts at rank
// r-1 and collects r-2, r-3, ..., r. Floating-point sums depend on their order once 3 or more ranks add,
// so this is what lets a reduce-scatter then all-gather (ZeRO-1, dist/parallel/zero/) give the same bits as
// Gloo's all_reduce over blocks of the same size (dist/parallel/zero/shard_layout.h).
// In place is allowed: `output` may be block `rank` of `input` (reduce_scatter_tensor's in-place form).
#ifndef TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_RING_REDUCE_SCATTER_H_
#define TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_RING_REDUCE_SCATTER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dist/process_group/host_reduce.h"
#include "gloo/context.h"

namespace tinyddp::dist {

struct RingReduceScatterArgs {
  const void* input = nullptr;  // context->size blocks of block_bytes each; read only but for block `rank`
  void* output = nullptr;       // block_bytes; receives block `rank` of the reduction (may be that block)
  size_t block_elements = 0;
  size_t element_size = 0;
  HostReduceFn reduce = nullptr;
  uint32_t tag = 0;  // distinguishes this call's messages; the same on every rank
  std::chrono::milliseconds timeout{0};
};

/// Runs the ring on `context`. Blocks until done; throws gloo::IoException on timeout or transport
/// failure, like Gloo's own collectives. `scratch` is reused across calls (grown to 2 blocks).
void RingReduceScatter(const std::shared_ptr<gloo::Context>& context, const RingReduceScatterArgs& args,
                       std::vector<uint8_t>& scratch);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_RING_REDUCE_SCATTER_H_
