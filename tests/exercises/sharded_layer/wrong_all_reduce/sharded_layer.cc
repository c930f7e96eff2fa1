// Exercise 5, a second known wrong solution: the whole layer from an all_reduce instead of an all-gather.
// Each rank writes its block into a zeroed buffer of the whole layer and the ranks sum the buffers: every
// rank ends with the layer, the output is right, and nothing outlives the call. But an all_reduce moves
// 2(N-1)/N of the layer per rank, twice the (N-1)/N an all-gather moves, to add zeros: the check must
// reject it, saying why.
#include "tests/exercises/sharded_layer/sharded_layer.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::StatusOr<Tensor> ShardedLinearForward(dist::ProcessGroup& pg, const Tensor& shard, const Tensor& x,
                                            int64_t out, int64_t in) {
  const int64_t block = shard.numel();
  Tensor layer = Tensor::Zeros({pg.size() * block}, shard.dtype(), shard.device());
  Tensor mine = layer.Rows(pg.rank() * block, (pg.rank() + 1) * block);
  ops::CopyInto(mine, shard);
  RETURN_IF_ERROR(pg.AllReduce(layer, dist::ReduceOp::kSum)->Wait());  // the mistake: sums of zeros, 2x the bytes
  return ops::Linear(x, layer.Rows(0, out * in).View({out, in}), layer.Rows(out * in, out * in + out));
}

}  // namespace tinyddp::exercises
