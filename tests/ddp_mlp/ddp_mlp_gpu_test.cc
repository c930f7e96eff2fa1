// //examples:ddp_mlp on GPUs: the real binary started as a subprocess runs one rank per GPU (up to 2)
// over NCCL on the synthetic dataset. The claims: it trains on the GPUs and learns; a run stopped by
// --max_steps mid-epoch and resumed ends with bit-identical weights and optimizer state to an
// uninterrupted run (cuBLAS, our kernels and a 2-rank NCCL sum are deterministic for fixed shapes), in
// float32 and in bf16 mixed precision; and with --cuda_graph the run ends bit-identical to the eager one.
// Skips without a GPU. Outside Bazel: DDP_MLP_BINARY=path/to/ddp_mlp ./ddp_mlp_gpu_test
#include <filesystem>
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

// "/step-000000NN" of the newest checkpoint in `dir` ("" when there is none).
std::string NewestCheckpoint(const std::string& dir) {
  std::string newest;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name > newest) newest = name;  // zero-padded: text order is step order
  }
  return newest.empty() ? "" : "/" + newest;
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

// --cuda_graph: after 3 eager steps the whole step (DeviceLr's cosine, zero_grad, forward, backward with the
// bucket all_reduces, SGD) is one graph; the last batch of each epoch (24 rows of 32 on 2 ranks) runs
// eagerly between replays. The weights and the optimizer state at the end are bit for bit those of the
// eager run, in float32 and bf16, and a graphed run stopped mid-epoch and resumed ends the same way too.
TEST(DdpMlpGpu, CudaGraphRunEndsBitIdenticalToTheEagerRunAndResumes) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  for (const std::string precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    const std::string eager = FreshDir("graph_eager_" + precision), graphed = FreshDir("graph_on_" + precision),
                      parts = FreshDir("graph_parts_" + precision);
    const std::vector<std::string> common = {"--epochs=3", "--precision=" + precision};
    auto with = [&](std::vector<std::string> extra) {
      extra.insert(extra.begin(), common.begin(), common.end());
      return TinyNccl(extra);
    };
    const RunResult a = RunDdpMlp(with({"--checkpoint_dir=" + eager}));
    ASSERT_EQ(a.exit_code, 0) << Explain(a);
    const RunResult b = RunDdpMlp(with({"--checkpoint_dir=" + graphed, "--cuda_graph"}));
    ASSERT_EQ(b.exit_code, 0) << Explain(b);
    EXPECT_NE(b.out.find("cuda graph: captured the training step after 3 eager steps"), std::string::npos) << b.out;
    EXPECT_NE(b.out.find("it runs eagerly (a graph replays fixed shapes)"), std::string::npos) << b.out;
    EXPECT_NE(b.out.find("run eagerly by the graphed step; at the end: cuda graph (replaying)"), std::string::npos)
        << "the run says at its end that the graph path was taken: " << b.out;
    const RunResult c = RunDdpMlp(with({"--checkpoint_dir=" + parts, "--cuda_graph", "--max_steps=26"}));
    ASSERT_EQ(c.exit_code, 0) << Explain(c);
    const RunResult d = RunDdpMlp(with({"--checkpoint_dir=" + parts, "--cuda_graph", "--resume"}));
    ASSERT_EQ(d.exit_code, 0) << Explain(d);
    const std::string end = NewestCheckpoint(eager);  // step 57 on 2 GPUs, 114 on one
    ASSERT_FALSE(end.empty()) << a.out;
    for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
      const std::string want = ReadFile(eager + end + file);
      ASSERT_GT(want.size(), 1000u);
      EXPECT_TRUE(ReadFile(graphed + end + file) == want) << file << ": graphed run differs";
      EXPECT_TRUE(ReadFile(parts + end + file) == want) << file << ": graphed, resumed run differs";
    }
  }
}

}  // namespace
}  // namespace tinyddp::testing
