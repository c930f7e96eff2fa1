// InitProcessGroup from launcher-style variables in real processes, its errors, and the debug mode
// switched on through TINYDDP_DISTRIBUTED_DEBUG.
#include "dist/init.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

InitOptions Gloo() {
  InitOptions options;
  options.backend = Backend::kGloo;
  options.timeout = std::chrono::seconds(120);
  return options;
}

TEST(InitProcessGroup, BuildsAGlooGroupWhoseRanksMatchTheLauncherVariables) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = InitProcessGroup(Gloo());
    ASSERT_TRUE(pg.ok()) << pg.status();
    EXPECT_EQ((*pg)->rank(), ctx.rank);
    EXPECT_EQ((*pg)->size(), 3);
    EXPECT_STREQ((*pg)->backend_name(), "gloo");
    Tensor t = testing::MakeTensor({1.0 + ctx.rank, -2.0 * ctx.rank}, DType::kFloat32, Device::CPU());
    ASSERT_TRUE((*pg)->AllReduce(t)->Wait().ok());
    EXPECT_EQ(testing::ReadTensor(t), (std::vector<double>{6, -6}));
  });
}

TEST(InitProcessGroup, DebugVariableMakesMismatchedCollectivesFailOnEveryRank) {
  RunOnRanks(2, [](const RankContext& ctx) {
    setenv("TINYDDP_DISTRIBUTED_DEBUG", "DETAIL", 1);
    auto pg = InitProcessGroup(Gloo());
    ASSERT_TRUE(pg.ok()) << pg.status();
    absl::Status s = ctx.rank == 0 ? (*pg)->AllReduce(Tensor::Zeros({7}, DType::kInt64))->Wait()
                                   : (*pg)->AllReduce(Tensor::Zeros({7}, DType::kInt32))->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(int64 [7], SUM)");
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(int32 [7], SUM)");
    EXPECT_PRED2(Contains, std::string(s.message()), "collective #0");
  });
}

TEST(InitProcessGroup, OutsideAJobSaysHowToStartOne) {
  if (IsWorker()) GTEST_SKIP() << "this test process itself runs as a rank of a job";
  auto pg = InitProcessGroup(Gloo());
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kNotFound);
  EXPECT_PRED2(Contains, std::string(pg.status().message()), "InitProcessGroup");
  EXPECT_PRED2(Contains, std::string(pg.status().message()), "launch");
}

TEST(InitProcessGroup, NcclWithoutCudaOrGpuIsAClearError) {
  if (NcclAvailable() && cuda::DeviceCount() > 0) GTEST_SKIP() << "this machine can run NCCL";
  WorkerEnv env;  // a one-rank job hosting its own store on a free port
  env.master_addr = "127.0.0.1";
  env.master_port = 0;
  InitOptions options = Gloo();
  options.backend = Backend::kNccl;
  auto pg = InitProcessGroup(env, options);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kFailedPrecondition) << pg.status();
  EXPECT_PRED2(Contains, std::string(pg.status().message()),
               NcclAvailable() ? "none is visible" : "built without the CUDA toolkit");
}

TEST(InitProcessGroup, AutoPicksNcclOnlyWithNcclAndAGpu) {
  const Backend want = NcclAvailable() && cuda::DeviceCount() > 0 ? Backend::kNccl : Backend::kGloo;
  EXPECT_EQ(ResolveBackend(Backend::kAuto), want);
  EXPECT_EQ(ResolveBackend(Backend::kGloo), Backend::kGloo);
  auto parsed = ParseBackend("NCCL");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, Backend::kNccl);
  auto bad = ParseBackend("mpi");
  EXPECT_FALSE(bad.ok());
  EXPECT_PRED2(Contains, std::string(bad.status().message()), "auto, nccl or gloo");
}

}  // namespace
}  // namespace tinyddp::dist
