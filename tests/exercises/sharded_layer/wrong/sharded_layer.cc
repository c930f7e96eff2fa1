// Exercise 5, a known wrong solution: the right output, one AllGather the first time, and no gather at all
// the next time, because it keeps the gathered layer "to save communication". That is DDP's memory again: the
// check must reject it, saying the layer outlived the forward.
#include "tests/exercises/sharded_layer/sharded_layer.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::StatusOr<Tensor> ShardedLinearForward(dist::ProcessGroup& pg, const Tensor& shard, const Tensor& x,
                                            int64_t out, int64_t in) {
  static Tensor cached;  // the mistake: a whole layer kept between forwards
  static const void* cached_for = nullptr;
  if (!cached.defined() || cached_for != shard.data_ptr()) {
    cached = Tensor::Empty({pg.size() * shard.numel()}, shard.dtype(), shard.device());
    RETURN_IF_ERROR(pg.AllGather(cached, shard)->Wait());
    cached_for = shard.data_ptr();
  }
  return ops::Linear(x, cached.Rows(0, out * in).View({out, in}), cached.Rows(out * in, out * in + out));
}

}  // namespace tinyddp::exercises
