// ConnectNccl (dist/testing/nccl_testing.h).
#include "dist/testing/nccl_testing.h"

#include <utility>

#include "dist/process_group/nccl/process_group_nccl.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"

namespace tinyddp::dist::testing {

std::shared_ptr<ProcessGroup> ConnectNccl(const RankContext& ctx, std::chrono::milliseconds timeout) {
  cuda::SetDevice(ctx.rank);
  cuda::Stream::SetCurrent(cuda::Stream::Create(ctx.rank));
  NcclOptions options;
  options.device = ctx.rank;
  options.timeout = timeout;
  auto pg = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  return std::shared_ptr<ProcessGroup>(std::move(*pg));
}

}  // namespace tinyddp::dist::testing
