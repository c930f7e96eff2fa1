// //examples:ddp_mlp on GPUs: the real binary started as a subprocess runs one rank per GPU (up to 2)
// over NCCL on the synthetic dataset. The claims: it trains on the GPUs and learns; a run stopped by
// --max_steps mid-epoch and resumed ends with bit-identical weights and optimizer state to an
// uninterrupted run (cuBLAS, our kernels and a 2-rank NCCL sum are deterministic for fixed shapes), in
// float32 and in bf16 mixed precision.
// Skips without a GPU. Outside Bazel: DDP_MLP_BINARY=path/to/ddp_mlp ./ddp_mlp_gpu_test
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

using dist::testing::ReadFile;

int Ranks() { return cuda::DeviceCount() >= 2 ? 2 : 1; }

// The tiny job with one rank per GPU (at most 2) over NCCL.
std::vector<std::string> TinyNccl(std::vector<std::string> more) {
  more.push_back(absl::StrCat("--nproc=", Ranks()));
  return TinyJob("nccl", more);
}

// The checkpoint folder of the last step of 3 epochs: 1200 examples in batches of 32 per rank, so 19 steps
// per epoch on 2 ranks and 38 on one.
std::string LastStepOfThreeEpochs() {
  const int steps_per_epoch = (1200 + 32 * Ranks() - 1) / (32 * Ranks());
  return absl::StrFormat("/step-%08d", 3 * steps_per_epoch);
}

TEST(DdpMlpGpu, NcclRanksTrainOnTheGpusAndLearn) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = FreshDir("gpu_learn");
  const RunResult r = RunDdpMlp(TinyNccl({"--epochs=3", "--metrics_out=" + dir + "/m.jsonl"}));
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_NE(r.out.find("over nccl on cuda:0"), std::string::npos) << r.out;
  EXPECT_GT(LastTestAccuracy(ReadFile(dir + "/m.jsonl")), 0.35) << "10 classes: chance is 0.1\n" << r.out;
}

TEST(DdpMlpGpu, ResumingAfterMaxStepsMatchesAnUninterruptedRunBitForBit) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string whole = FreshDir("gpu_whole"), parts = FreshDir("gpu_parts");
  const RunResult a = RunDdpMlp(TinyNccl({"--epochs=3", "--checkpoint_dir=" + whole}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const RunResult b = RunDdpMlp(TinyNccl({"--epochs=3", "--checkpoint_dir=" + parts, "--max_steps=26"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  const RunResult c = RunDdpMlp(TinyNccl({"--epochs=3", "--checkpoint_dir=" + parts, "--resume"}));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  const std::string end = LastStepOfThreeEpochs();
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = ReadFile(whole + end + file);
    ASSERT_GT(want.size(), 1000u) << whole + end + file;
    EXPECT_TRUE(ReadFile(parts + end + file) == want) << file << " differs after resuming mid-epoch on GPU";
  }
}

TEST(DdpMlpGpu, Bf16RanksLearnAndResumeBitForBit) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string whole = FreshDir("gpu_bf16_whole"), parts = FreshDir("gpu_bf16_parts");
  const RunResult a = RunDdpMlp(
      TinyNccl({"--precision=bf16", "--epochs=3", "--checkpoint_dir=" + whole, "--metrics_out=" + whole + "/m.jsonl"}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  EXPECT_NE(a.out.find("bf16 mixed precision"), std::string::npos) << a.out;
  EXPECT_GT(LastTestAccuracy(ReadFile(whole + "/m.jsonl")), 0.35) << "10 classes: chance is 0.1\n" << a.out;
  const RunResult b =
      RunDdpMlp(TinyNccl({"--precision=bf16", "--epochs=3", "--checkpoint_dir=" + parts, "--max_steps=26"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  const RunResult c = RunDdpMlp(TinyNccl({"--precision=bf16", "--epochs=3", "--checkpoint_dir=" + parts, "--resume"}));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  const std::string end = LastStepOfThreeEpochs();
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = ReadFile(whole + end + file);
    ASSERT_GT(want.size(), 1000u) << whole + end + file;
    EXPECT_TRUE(ReadFile(parts + end + file) == want) << file << " differs after resuming a bf16 run mid-epoch on GPU";
  }
}

}  // namespace
}  // namespace tinyddp::testing
