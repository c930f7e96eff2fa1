// One machine's workers: --nproc_per_node's meanings and the env:// variables each worker is started with.
#include "dist/launch/workers.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(ResolveNprocPerNode, FollowsTorchrunsMeanings) {
  EXPECT_EQ(*ResolveNprocPerNode("gpu", 8, 96), 8);
  EXPECT_EQ(*ResolveNprocPerNode("cpu", 8, 96), 96);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 96), 8);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 0, 3), 3);
  EXPECT_EQ(*ResolveNprocPerNode("5", 0, 3), 5);
  auto no_gpu = ResolveNprocPerNode("gpu", 0, 3);
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_NE(no_gpu.status().message().find("no GPU"), std::string::npos);
  EXPECT_FALSE(ResolveNprocPerNode("0", 1, 1).ok());
  EXPECT_FALSE(ResolveNprocPerNode("two", 1, 1).ok());
  EXPECT_GE(UsableCpuCount(), 1);
}

TEST(WorkerSpecs, GiveEachWorkerOfANodeItsRanksAndTheJobsStore) {
  const std::vector<WorkerProcessSpec> specs = WorkerSpecs(
      {.argv = {"prog", "--x"}, .nproc = 2, .world_size = 6, .node_rank = 1, .master_addr = "10.0.0.1",
       .master_port = 29500, .store_secret = "s3cret", .extra_env = {{"TINYDDP_TIMEOUT", "20s"}}},
      /*round=*/2);
  ASSERT_EQ(specs.size(), 2u);
  auto has = [](const WorkerProcessSpec& spec, const std::string& name, const std::string& value) {
    return std::count(spec.env.begin(), spec.env.end(), std::make_pair(name, value)) == 1;
  };
  for (int local = 0; local < 2; ++local) {
    const WorkerProcessSpec& spec = specs[local];
    EXPECT_EQ(spec.rank, 2 + local);
    EXPECT_EQ(spec.local_rank, local);
    EXPECT_EQ(spec.argv, (std::vector<std::string>{"prog", "--x"}));
    EXPECT_TRUE(has(spec, "RANK", std::to_string(2 + local)));
    EXPECT_TRUE(has(spec, "WORLD_SIZE", "6"));
    EXPECT_TRUE(has(spec, "LOCAL_RANK", std::to_string(local)));
    EXPECT_TRUE(has(spec, "LOCAL_WORLD_SIZE", "2"));
    EXPECT_TRUE(has(spec, "GROUP_RANK", "1"));
    EXPECT_TRUE(has(spec, "MASTER_ADDR", "10.0.0.1"));
    EXPECT_TRUE(has(spec, "MASTER_PORT", "29500"));
    EXPECT_TRUE(has(spec, "TINYDDP_LAUNCHER_STORE", "1"));
    EXPECT_TRUE(has(spec, "TINYDDP_RESTART_COUNT", "2"));
    EXPECT_TRUE(has(spec, "TINYDDP_STORE_SECRET", "s3cret"));
    EXPECT_TRUE(has(spec, "TINYDDP_TIMEOUT", "20s"));
  }
}

}  // namespace
}  // namespace tinyddp::dist
