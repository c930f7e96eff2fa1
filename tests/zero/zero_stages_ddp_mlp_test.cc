// //examples:ddp_mlp --zero=2 and --zero=3 end to end, as a user runs them (2 Gloo ranks, the tiny synthetic
// job): rank 0 prints one table of what each rank holds; their checkpoints are --zero=0's, byte for byte
// (on 2 ranks every sum is a + b, so ZeRO-3's per-layer blocks add as DDP's buckets do), so they load into
// PyTorch and into any mode; and a run stopped mid-epoch by one mode and resumed by another ends bit for bit
// where an uninterrupted plain run ends.
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using dist::testing::ReadFile;

std::vector<std::string> Tiny(const std::vector<std::string>& more) { return TinyJob("gloo", more); }

void ExpectSameCheckpoint(const std::string& a, const std::string& b, const std::string& what) {
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = ReadFile(a + file);
    ASSERT_GT(want.size(), 1000u) << a + file;
    EXPECT_TRUE(ReadFile(b + file) == want) << file << " differs: " << what;
  }
}

TEST(ZeroStagesDdpMlp, TwoAndThreePrintWhatEachRankHoldsAndWriteTheSameCheckpointsAsPlainDdp) {
  // (optimizer, precision, stages).
  const std::vector<std::tuple<std::string, std::string, std::vector<int>>> cases = {
      {"sgd", "fp32", {2, 3}}, {"adamw", "fp32", {2, 3}}, {"adamw", "bf16", {2, 3}}};
  for (const auto& [optimizer, precision, stages] : cases) {
    const std::string name = optimizer + "_" + precision;
    const std::vector<std::string> common = {"--epochs=2", "--optimizer=" + optimizer, "--precision=" + precision,
                                             "--seed=5"};
    const std::string plain = FreshDir("plain_" + name);
    std::vector<std::string> without = common;
    without.insert(without.end(), {"--zero=0", "--checkpoint_dir=" + plain});
    const RunResult p = RunDdpMlp(Tiny(without));
    ASSERT_EQ(p.exit_code, 0) << Explain(p);
    for (int stage : stages) {
      const std::string dir = FreshDir("zero" + std::to_string(stage) + "_" + name);
      std::vector<std::string> with = common;
      with.insert(with.end(), {"--zero=" + std::to_string(stage), "--checkpoint_dir=" + dir});
      const RunResult z = RunDdpMlp(Tiny(with));
      ASSERT_EQ(z.exit_code, 0) << Explain(z);
      // The table, once, with a line per rank.
      const std::string title = "memory per rank, --zero=" + std::to_string(stage);
      EXPECT_NE(z.out.find(title), std::string::npos) << z.out;
      EXPECT_EQ(z.out.find(title), z.out.rfind(title)) << "printed more than once\n" << z.out;
      if (stage == 2) EXPECT_NE(z.out.find("Gloo reduce_scatter to shards"), std::string::npos) << z.out;
      if (stage == 3) EXPECT_NE(z.out.find("ZeRO-3: each layer's weight and bias"), std::string::npos) << z.out;
      ExpectSameCheckpoint(plain + "/step-00000038", dir + "/step-00000038",
                           "--zero=" + std::to_string(stage) + " against --zero=0, " + name);
    }
  }
}

TEST(ZeroStagesDdpMlp, StoppedByOneModeAndResumedByAnotherMatchesAnUninterruptedPlainRunBitForBit) {
  const std::vector<std::string> common = {"--epochs=3", "--lr_schedule=cosine", "--optimizer=adamw", "--seed=11"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return Tiny(extra);
  };
  const std::string whole = FreshDir("stages_whole");
  const RunResult a = RunDdpMlp(with({"--zero=0", "--checkpoint_dir=" + whole}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  // (stops, resumes): ZeRO-3 from plain DDP's checkpoint, ZeRO-2 from ZeRO-3's.
  for (const auto& [first, second] : std::vector<std::pair<int, int>>{{0, 3}, {3, 2}}) {
    const std::string dir = FreshDir("stages_" + std::to_string(first) + "_" + std::to_string(second));
    const RunResult b =
        RunDdpMlp(with({"--zero=" + std::to_string(first), "--checkpoint_dir=" + dir, "--max_steps=26"}));
    ASSERT_EQ(b.exit_code, 0) << Explain(b);
    ASSERT_TRUE(fs::exists(dir + "/step-00000026")) << b.out;
    const RunResult c = RunDdpMlp(with({"--zero=" + std::to_string(second), "--checkpoint_dir=" + dir, "--resume"}));
    ASSERT_EQ(c.exit_code, 0) << Explain(c);
    EXPECT_NE(c.out.find("resumed from " + dir + "/step-00000026"), std::string::npos) << c.out;
    ExpectSameCheckpoint(whole + "/step-00000057", dir + "/step-00000057",
                         "--zero=" + std::to_string(first) + " stopped, --zero=" + std::to_string(second) + " resumed");
  }
}

}  // namespace
}  // namespace tinyddp::testing
