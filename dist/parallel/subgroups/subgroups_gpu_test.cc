// NewGroup over NCCL (tag gpu; skipped without a GPU): on one GPU a one-rank world and its one-rank subgroup,
// each with its own communicator; on two GPUs a pair and two singletons, interleaved with the world.
#include <memory>
#include <vector>

#include "dist/parallel/subgroups/new_group.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;

void SubgroupsOnNccl(const RankContext& ctx) {
  cuda::SetDevice(ctx.rank);
  cuda::Stream::SetCurrent(cuda::Stream::Create(ctx.rank));
  NcclOptions options;
  options.device = ctx.rank;
  options.timeout = std::chrono::seconds(120);
  auto made = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<ProcessGroup> world(std::move(*made));
  const Device device = Device::CUDA(ctx.rank);
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  std::vector<std::vector<int>> lists = {{0}};
  if (ctx.world_size == 2) lists = {{0, 1}, {1}, {0}};
  for (const auto& ranks : lists) {
    auto g = NewGroup(*world, ranks);  // an NCCL world has a store of its own (SubStore)
    ASSERT_TRUE(g.ok()) << g.status();
    groups.push_back(*g);
  }
  for (size_t i = 0; i < lists.size(); ++i) {
    if (groups[i] == nullptr) continue;
    EXPECT_STREQ(groups[i]->backend_name(), "nccl");
    EXPECT_EQ(groups[i]->device_index(), ctx.rank);
    Tensor t = Tensor::Full({1000}, 1.0 + ctx.rank, DType::kFloat32, device);
    ASSERT_TRUE(groups[i]->AllReduce(t)->Wait().ok());
    Tensor w = Tensor::Full({10}, 1.0, DType::kFloat32, device);
    ASSERT_TRUE(world->AllReduce(w)->Wait().ok());  // the world, interleaved
    double want = 0;
    for (int r : lists[i]) want += 1.0 + r;
    for (float v : t.ToVector<float>()) ASSERT_EQ(v, want);
    for (float v : w.ToVector<float>()) ASSERT_EQ(v, ctx.world_size);
  }
}

TEST(NewGroupOnNccl, OneGpuWorldAndItsSubgroupHaveTheirOwnCommunicators) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  testing::RunOnRanks(1, SubgroupsOnNccl);
}

TEST(NewGroupOnNccl, TwoGpusRunAPairAndSingletonsInterleavedWithTheWorld) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << cuda::DeviceCount();
  testing::RunOnRanks(2, SubgroupsOnNccl);
}

}  // namespace
}  // namespace tinyddp::dist
