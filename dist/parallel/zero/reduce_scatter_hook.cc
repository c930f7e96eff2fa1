// ZeRO-1's reduce-scatter comm hook (dist/parallel/zero/reduce_scatter_hook.h).
#include "dist/parallel/zero/reduce_scatter_hook.h"

#include <string>

#include "base/check.h"

namespace tinyddp::dist::zero {

CommHook ReduceScatterHook(const ProcessGroup& pg) { return ReduceScatterHook(pg, BlockSizeFor(pg.backend_name())); }

CommHook ReduceScatterHook(const ProcessGroup& pg, BlockSize size) {
  CommHook hook;
  const int world = pg.size();
  hook.padded_numel = [world, size](int64_t numel, int64_t element_size) {
    return PaddedNumel(numel, world, element_size, size);
  };
  hook.run = [](ProcessGroup& pg, GradBucket& bucket) -> CommFuture {
    const Tensor& buffer = bucket.buffer;
    TINYDDP_CHECK_OP(buffer.defined() && buffer.numel() % pg.size() == 0, "ZeRO-1 reduce_scatter hook", "bucket ",
                     bucket.index, " is not one flat buffer padded to a multiple of the ", pg.size(),
                     " ranks; hint: ZeRO-1 needs DdpOptions::gradient_as_bucket_view, and the hook made for this "
                     "group (ReduceScatterHook(pg)) pads the buckets");
    const int64_t shard = buffer.numel() / pg.size();
    const Tensor mine = buffer.Rows(pg.rank() * shard, (pg.rank() + 1) * shard);
    return CommFuture{pg.ReduceScatter(mine, buffer, ReduceOp::kAvg), nullptr};
  };
  hook.path = [](const ProcessGroup& pg, const GradBucket&) {
    const std::string backend = pg.backend_name();
    if (backend == "nccl") return "NCCL reduce_scatter";
    if (backend == "gloo") return "Gloo reduce_scatter";
    return "reduce_scatter";
  };
  return hook;
}

}  // namespace tinyddp::dist::zero
