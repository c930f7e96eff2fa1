// The DDP ladder (dist/ladder) on GPUs with NCCL, one process per GPU: the same claims as
// ddp_ladder_test (the four rungs match one process on the concatenated batch and stay bit-identical
// across ranks; gradient accumulation under no_sync equals one large batch), here with the rungs' streams:
// the bucketed rung's copies and all_reduces are only ordered by the group's stream waits. Needs 2 GPUs;
// skips otherwise.
#include <chrono>
#include <memory>
#include <string>

#include "dist/ladder/ladder.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/nccl_testing.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"
#include "tests/ddp_ladder/ladder_checks.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

#define SKIP_WITHOUT_TWO_GPUS() \
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << cuda::DeviceCount()

// This rank's NCCL group on GPU `rank`, with a compute stream of its own (as ddp_mlp runs).
TEST(DdpLadderGpu, EveryRungMatchesOneProcessOnTheConcatenatedBatchAndStaysBitIdenticalAcrossRanks) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = testing::ConnectNccl(ctx);
    ASSERT_NE(pg, nullptr);
    ladder_testing::ExpectEveryRungMatchesOneProcess(*pg, Device::CUDA(ctx.rank));
  });
}

TEST(DdpLadderGpu, MicroBatchesUnderNoSyncEqualOneStepOnTheirConcatenationOnEveryRung) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = testing::ConnectNccl(ctx);
    ASSERT_NE(pg, nullptr);
    for (const std::string& rung : ladder::RungNames()) {
      ladder_testing::ExpectAccumulationMatchesOneLargeBatch(*pg, Device::CUDA(ctx.rank), rung);
    }
  });
}

}  // namespace
}  // namespace tinyddp::dist
