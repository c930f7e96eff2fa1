// Memory estimate: the parts follow the flags (AdamW holds twice SGD's state, ZeRO-1 divides it by the
// ranks, bf16 adds compute copies, GPU ranks keep the model off the host); the issue's --hidden=100000000
// is refused with its figures against available memory, a cgroup limit and `ulimit -v`, while the default
// run fits a small machine; and the limits are read from real /proc and /sys/fs/cgroup files (v1 and v2),
// the tightest of a cgroup and its parents.
#include "examples/internal/memory_estimate.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "examples/internal/train_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kGiB = int64_t{1} << 30;

// The tests' tiny job (tests/ddp_mlp/run_ddp_mlp.h): 32 features, a 32-24-10 MLP, batch 32, 1200 examples.
TrainOptions TinyJob() {
  TrainOptions o;
  o.dataset = "synthetic";
  o.synthetic_examples = 1200;
  o.synthetic_input_size = 32;
  o.hidden = {24};
  o.batch_size = 32;
  return o;
}

std::map<std::string, double> Parts(const MemoryEstimate& estimate) {
  return {estimate.parts.begin(), estimate.parts.end()};
}

TEST(MemoryEstimate, CountsWhatTheFlagsMakeEachRankHold) {
  TrainOptions o = TinyJob();
  const double params = 33 * 24 + 25 * 10;  // 1042: two Linear layers, weights and biases
  std::map<std::string, double> parts = Parts(EstimateRankMemory(o, 2, /*on_gpu=*/false));
  EXPECT_EQ(parts["parameters"], 4 * params);
  EXPECT_EQ(parts["gradients"], 4 * params);
  EXPECT_EQ(parts["SGD momentum"], 4 * params);
  EXPECT_EQ(parts["the dataset"], (1200 + 240) * (4 * 32 + 8));
  // Evaluation runs 120 rows at a time here (the 240 test examples over 2 ranks): about the widest layer's
  // output and ReLU, plus the input. More than a training batch of 32.
  EXPECT_EQ(parts["activations of an evaluation batch of 120"], 120 * (2 * 24 * 4 + 4 * 32));
  // A training batch of 256: each layer's output and ReLU (2 x (24 + 10)), two more at the widest, the input.
  o.batch_size = 256;
  EXPECT_EQ(Parts(EstimateRankMemory(o, 2, false))["activations of a batch of 256"],
            256 * ((2 * 34 + 2 * 24) * 4 + 4 * 32));
  o.batch_size = 32;

  o.optimizer = "adamw";
  o.zero = 1;
  o.precision = "bf16";
  parts = Parts(EstimateRankMemory(o, 4, false));
  EXPECT_EQ(parts["AdamW moments (1/4, ZeRO-1)"], 8 * params / 4);
  EXPECT_EQ(parts["bfloat16 compute copies"], 2 * params);
  EXPECT_EQ(parts.count("SGD momentum"), 0u);

  // On GPUs the model's state lives in device memory: the host holds the data and the runtime.
  parts = Parts(EstimateRankMemory(o, 4, /*on_gpu=*/true));
  EXPECT_EQ(parts.count("parameters"), 0u);
  EXPECT_EQ(parts.count("the dataset"), 1u);
}

TEST(MemoryEstimate, OnAGpuTheModelsStateIsCheckedAgainstTheDevicesMemory) {
  TrainOptions o = TinyJob();
  // The tests' tiny job fits any GPU; an unknown device (0 bytes) is not checked.
  EXPECT_TRUE(CheckDeviceMemory(o, 2, 141 * kGiB, "cuda:0 (NVIDIA H200)").ok());
  EXPECT_TRUE(CheckDeviceMemory(o, 2, 0, "cuda:0").ok());
  // --hidden=100000000 on one rank: 32*1e8 + 1e8 + 1e8*10 + 10 parameters, each with a gradient and SGD
  // momentum: about 16.4 GB, over an 80 GiB GPU once activations of the evaluation batch are counted.
  o.hidden = {100000000};
  const absl::Status refused = CheckDeviceMemory(o, 1, 80 * kGiB, "cuda:0 (NVIDIA A100)");
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), testing::HasSubstr("--hidden=100000000 needs about"));
  EXPECT_THAT(std::string(refused.message()), testing::HasSubstr("of GPU memory per rank ("));
  EXPECT_THAT(std::string(refused.message()), testing::HasSubstr("parameters 16.0 GiB, gradients 16.0 GiB"));
  EXPECT_THAT(std::string(refused.message()), testing::HasSubstr("but cuda:0 (NVIDIA A100) has 80.0 GiB"));
  EXPECT_THAT(std::string(refused.message()), testing::Not(testing::HasSubstr("the dataset")));
  // Over 8 ranks with ZeRO-3 the state is sharded and each rank's evaluation batch is an eighth: it fits 80 GiB,
  // not 16.
  o.zero = 3;
  EXPECT_TRUE(CheckDeviceMemory(o, 8, 80 * kGiB, "cuda:0").ok());
  EXPECT_FALSE(CheckDeviceMemory(o, 8, 16 * kGiB, "cuda:0").ok());
}

TEST(MemoryEstimate, AWideLayerIsRefusedWithItsFiguresAgainstAvailableMemoryAndTheCgroup) {
  TrainOptions o = TinyJob();
  o.hidden = {100000000};
  const MemoryEstimate estimate = EstimateRankMemory(o, 2, false);
  EXPECT_EQ(estimate.biggest_flag, "--hidden=100000000");
  // 4.3e9 parameters: 16.0 GiB each for weights, gradients and momentum; an evaluation batch of 120 rows
  // through a 10^8-wide layer is larger still.
  EXPECT_NEAR(Parts(estimate)["parameters"] / kGiB, 16.0, 0.1);
  HostMemory host;
  host.available = 22 * kGiB;
  host.cgroup_limit = 24 * kGiB;
  host.cgroup_usage = 4 * kGiB;
  const absl::Status refused = CheckMemory(estimate, 2, host);
  ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  const std::string message(refused.message());
  EXPECT_TRUE(absl::StartsWith(message, "--hidden=100000000 needs about ")) << message;
  EXPECT_TRUE(absl::StrContains(message, " per rank (activations of an evaluation batch of 120 89.4 GiB, parameters "
                                         "16.0 GiB, gradients 16.0 GiB, SGD momentum 16.0 GiB, "))
      << message;
  EXPECT_TRUE(absl::StrContains(message, " x 2 ranks = ")) << message;
  EXPECT_TRUE(absl::StrContains(message, ", but this machine has 20.0 GiB available (MemAvailable 22.0 GiB; cgroup "
                                         "limit 24.0 GiB, 4.0 GiB of it in use)"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "Hint: a smaller --hidden, or --zero=1")) << message;
  EXPECT_TRUE(absl::StrContains(message, "fewer ranks (--nproc); --ignore_worker_limits starts it anyway")) << message;
}

TEST(MemoryEstimate, AnAddressSpaceLimitBoundsEachRankOnItsOwn) {
  TrainOptions o = TinyJob();
  o.hidden = {20000000};  // about 3.2 GiB of parameters, gradients and momentum each
  const MemoryEstimate estimate = EstimateRankMemory(o, 2, false);
  HostMemory host;
  host.available = 1000 * kGiB;
  host.address_space = 4 * kGiB;
  host.address_space_used = 200 << 20;
  const absl::Status refused = CheckMemory(estimate, 2, host);
  ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), ", but ulimit -v allows each process 4.0 GiB of address space (a "
                                                   "rank maps 200.0 MiB before it allocates anything)"))
      << refused;
  EXPECT_FALSE(absl::StrContains(refused.message(), "this machine has")) << refused;
  // Ten ranks of the tiny job fit the same limits: it is per process, not per machine.
  EXPECT_TRUE(CheckMemory(EstimateRankMemory(TinyJob(), 10, false), 10, host).ok());
}

TEST(MemoryEstimate, TheDefaultRunFitsASmallMachineAndUnknownLimitsAreNotChecked) {
  const TrainOptions defaults;  // Fashion-MNIST, 784-512-512-10, 2 CPU ranks
  HostMemory host;
  host.available = 2 * kGiB;
  EXPECT_TRUE(CheckMemory(EstimateRankMemory(defaults, 2, false), 2, host).ok());
  EXPECT_TRUE(CheckMemory(EstimateRankMemory(defaults, 2, false), 2, HostMemory()).ok());
  host.available = 300 << 20;  // but not 300 MiB: each rank loads the 70000 images
  EXPECT_FALSE(CheckMemory(EstimateRankMemory(defaults, 2, false), 2, host).ok());
}

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string FakeRoot(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  fs::remove_all(root);
  Write(root + "/proc/meminfo", "MemTotal:       32000000 kB\nMemAvailable:   20971520 kB\n");
  Write(root + "/proc/self/status", "Name:\tddp_mlp\nVmSize:\t  102400 kB\n");
  return root;
}

TEST(MemoryEstimate, ReadsTheTightestCgroupV2LimitOfTheProcessAndItsParents) {
  const std::string root = FakeRoot("cgroup_v2");
  Write(root + "/proc/self/cgroup", "0::/job/step\n");
  Write(root + "/sys/fs/cgroup/job/memory.max", "8589934592\n");  // 8 GiB for the whole job
  Write(root + "/sys/fs/cgroup/job/memory.current", "1073741824\n");
  Write(root + "/sys/fs/cgroup/job/step/memory.max", "max\n");
  Write(root + "/sys/fs/cgroup/job/step/memory.current", "4096\n");
  const HostMemory host = ReadHostMemory(root);
  EXPECT_EQ(host.available, 20 * kGiB);
  EXPECT_EQ(host.cgroup_limit, 8 * kGiB);
  EXPECT_EQ(host.cgroup_usage, 1 * kGiB);
  EXPECT_EQ(host.Usable(), 7 * kGiB);
  EXPECT_EQ(host.address_space_used, 100 << 20);
}

TEST(MemoryEstimate, ReadsACgroupV1MemoryLimitAndTakesUnlimitedForNone) {
  const std::string root = FakeRoot("cgroup_v1");
  // The layout of this repository's CI container: v1 memory controller, a unified hierarchy without it.
  Write(root + "/proc/self/cgroup", "9:name=systemd:/\n4:cpuacct,memory:/process_api/db67\n0::/\n");
  Write(root + "/sys/fs/cgroup/memory/process_api/db67/memory.limit_in_bytes", "9223372036854771712\n");
  Write(root + "/sys/fs/cgroup/memory/process_api/db67/memory.usage_in_bytes", "3387392\n");
  Write(root + "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "2147483648\n");
  Write(root + "/sys/fs/cgroup/memory/process_api/memory.usage_in_bytes", "536870912\n");
  Write(root + "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  const HostMemory host = ReadHostMemory(root);
  EXPECT_EQ(host.cgroup_limit, 2 * kGiB);
  EXPECT_EQ(host.cgroup_usage, kGiB / 2);
  EXPECT_EQ(host.Usable(), 3 * kGiB / 2);

  Write(root + "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(ReadHostMemory(root).cgroup_limit, -1);
  EXPECT_EQ(ReadHostMemory(root).Usable(), 20 * kGiB);
}

TEST(MemoryEstimate, ThisMachineHasSomeMemoryAvailable) {
  const HostMemory host = ReadHostMemory();
  EXPECT_GT(host.available, 0);
  EXPECT_GT(host.address_space_used, 0);
}

}  // namespace
}  // namespace tinyddp::examples
