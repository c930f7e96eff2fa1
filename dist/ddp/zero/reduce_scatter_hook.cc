// ZeRO-1's reduce-scatter comm hook (dist/ddp/zero/reduce_scatter_hook.h).
#include "dist/ddp/zero/reduce_scatter_hook.h"

#include <string>

#include "tensor/internal/check.h"

namespace tinyddp::dist::zero {

CommHook ReduceScatterHook() {
  CommHook hook;
  hook.run = [](ProcessGroup& pg, GradBucket& bucket) -> CommFuture {
    const Tensor& buffer = bucket.buffer;
    TINYDDP_CHECK_OP(buffer.defined() && buffer.numel() % pg.size() == 0, "ZeRO-1 reduce_scatter hook", "bucket ",
                     bucket.index, " is not one flat buffer padded to a multiple of the ", pg.size(),
                     " ranks; hint: ZeRO-1 needs DdpOptions::gradient_as_bucket_view and buckets padded by "
                     "zero::PaddedNumel (DDP sets both when DdpOptions::zero_stage is 1)");
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
