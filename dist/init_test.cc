// InitProcessGroup from launcher-style variables in real processes, and its errors (the debug mode of
// TINYDDP_DISTRIBUTED_DEBUG: dist/observe/debug_check/debug_check_test.cc).
#include "dist/init.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/process_test_util.h"
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

TEST(InitProcessGroup, OutsideAJobSaysHowToStartOne) {
  if (IsWorker()) GTEST_SKIP() << "this test process itself runs as a rank of a job";
  auto pg = InitProcessGroup(Gloo());
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kNotFound);
  EXPECT_PRED2(Contains, std::string(pg.status().message()), "InitProcessGroup");
  EXPECT_PRED2(Contains, std::string(pg.status().message()), "launch");
}

TEST(InitProcessGroup, NcclWithoutCudaOrGpuIsAClearError) {
  if (cuda::BuiltWithCuda() && cuda::DeviceCount() > 0) GTEST_SKIP() << "this machine can run NCCL";
  WorkerEnv env;  // a one-rank job hosting its own store on a free port
  env.master_addr = "127.0.0.1";
  env.master_port = 0;
  InitOptions options = Gloo();
  options.backend = Backend::kNccl;
  auto pg = InitProcessGroup(env, options);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kFailedPrecondition) << pg.status();
  EXPECT_PRED2(Contains, std::string(pg.status().message()),
               cuda::BuiltWithCuda() ? "none is visible" : "built without the CUDA toolkit");
}

TEST(InitProcessGroup, AutoPicksNcclOnlyWithAGpuForEveryRankOfTheMachine) {
  const int gpus = cuda::DeviceCount();
  EXPECT_EQ(ResolveBackend(Backend::kAuto, 1), gpus > 0 ? Backend::kNccl : Backend::kGloo);
  EXPECT_EQ(ResolveBackend(Backend::kAuto, std::max(gpus, 1)), gpus > 0 ? Backend::kNccl : Backend::kGloo);
  EXPECT_EQ(ResolveBackend(Backend::kAuto, gpus + 1), Backend::kGloo) << "one rank would have no GPU";
  EXPECT_EQ(ResolveBackend(Backend::kGloo, 1), Backend::kGloo);
  EXPECT_EQ(ResolveBackend(Backend::kNccl, gpus + 1), Backend::kNccl) << "an explicit backend is never changed";
  auto parsed = ParseBackend("NCCL");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, Backend::kNccl);
  auto bad = ParseBackend("mpi");
  EXPECT_FALSE(bad.ok());
  EXPECT_PRED2(Contains, std::string(bad.status().message()), "auto, nccl or gloo");
}

// What InitProcessGroup writes to stderr (fd 2) while it runs, captured through a file.
std::string StderrOf(const std::function<void()>& body) {
  const std::string path = absl::StrCat(testing::MakeTempDir(), "/stderr");
  std::fflush(stderr);
  const int saved = dup(2);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 2);
  close(fd);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  return testing::ReadFile(path);
}

TEST(InitProcessGroup, AutoWithMoreRanksThanGpusFallsBackToGlooAndSaysSoOncePerMachine) {
  // One rank more than this machine has GPUs (at least 2): with NCCL one rank would find no cuda:LOCAL_RANK.
  const int gpus = cuda::DeviceCount();
  const int world = std::max(2, gpus + 1);
  RunOnRanks(world, [gpus](const RankContext& ctx) {
    InitOptions options = Gloo();
    options.backend = Backend::kAuto;
    absl::StatusOr<std::shared_ptr<ProcessGroup>> pg;
    const std::string err = StderrOf([&] { pg = InitProcessGroup(options); });
    ASSERT_TRUE(pg.ok()) << pg.status();
    EXPECT_STREQ((*pg)->backend_name(), "gloo");
    if (gpus > 0 && ctx.rank == 0) {
      EXPECT_PRED2(Contains, err, absl::StrCat("backend auto: ", ctx.world_size, " ranks on this machine but ", gpus,
                                               " GPU(s), so gloo"));
      EXPECT_EQ(err.find("backend auto"), err.rfind("backend auto")) << "one line, not one per call: " << err;
    } else {
      EXPECT_EQ(err.find("backend auto"), std::string::npos) << "only local rank 0 of a machine with GPUs says it";
    }
    Tensor t = testing::MakeTensor({0.5 * ctx.rank, 3.0 - ctx.rank}, DType::kFloat32, Device::CPU());
    ASSERT_TRUE((*pg)->AllReduce(t)->Wait().ok());
    const double n = ctx.world_size;
    EXPECT_EQ(testing::ReadTensor(t), (std::vector<double>{0.25 * n * (n - 1), 3 * n - n * (n - 1) / 2}));
  });
}

}  // namespace
}  // namespace tinyddp::dist
