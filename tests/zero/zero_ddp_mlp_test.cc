// //examples:ddp_mlp --zero=1 end to end, as a user runs it (2 Gloo ranks, the tiny synthetic job): it
// reports what each rank holds, writes the same checkpoint files as --zero=0 (so they load into PyTorch
// and into either mode), under --precision=fp32 and bf16, and a run stopped mid-epoch and resumed ends bit
// for bit where an uninterrupted run ends, whichever mode wrote the checkpoint and whichever resumes it.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using dist::testing::ReadFile;

std::vector<std::string> Tiny(const std::vector<std::string>& more) { return TinyJob("gloo", more); }

// Expects the model and optimizer files of two checkpoint folders to be the same bytes.
void ExpectSameCheckpoint(const std::string& a, const std::string& b, const std::string& what) {
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = ReadFile(a + file);
    ASSERT_GT(want.size(), 1000u) << a + file;
    EXPECT_TRUE(ReadFile(b + file) == want) << file << " differs: " << what;
  }
}

TEST(ZeroDdpMlp, ReportsItsMemoryAndWritesTheSameCheckpointsAsPlainDdp) {
  for (const auto& [optimizer, precision] : std::vector<std::pair<std::string, std::string>>{
           {"sgd", "fp32"}, {"adamw", "fp32"}, {"sgd", "bf16"}}) {
    const std::string name = optimizer + "_" + precision;
    const std::string zero = FreshDir("zero_" + name), plain = FreshDir("plain_" + name);
    const std::vector<std::string> common = {"--epochs=2", "--optimizer=" + optimizer, "--precision=" + precision,
                                             "--seed=5"};
    std::vector<std::string> with_zero = common, without = common;
    with_zero.insert(with_zero.end(), {"--zero=1", "--checkpoint_dir=" + zero});
    without.insert(without.end(), {"--zero=0", "--checkpoint_dir=" + plain});
    const RunResult z = RunDdpMlp(Tiny(with_zero));
    ASSERT_EQ(z.exit_code, 0) << Explain(z);
    const RunResult p = RunDdpMlp(Tiny(without));
    ASSERT_EQ(p.exit_code, 0) << Explain(p);

    EXPECT_NE(z.out.find("Gloo reduce_scatter"), std::string::npos) << z.out;
    // 32-24-10: 1042 parameters in one bucket, cut into 2 blocks of 522 (Gloo's chunks: 2 * ceil(1042 / 4)).
    const std::string state = optimizer == "sgd" ? "optimizer state 2088 bytes (unsharded, as in plain DDP: 4168)"
                                                 : "optimizer state 4176 bytes (unsharded, as in plain DDP: 8336)";
    EXPECT_NE(z.out.find("ZeRO-1 memory per rank: this rank steps 522 of 1042 parameters (ceil(P/2) = 521, + 2 "
                         "padding over all ranks); " + state + "; master weights 2088 bytes"),
              std::string::npos)
        << z.out;
    if (precision == "bf16") {  // the all-gathers carry the bfloat16 compute copies
      EXPECT_NE(z.out.find("all_gather returns the bfloat16 compute copies"), std::string::npos) << z.out;
    }
    ExpectSameCheckpoint(plain + "/step-00000038", zero + "/step-00000038", "--zero=1 against --zero=0, " + name);
  }
}

TEST(ZeroDdpMlp, ResumedMidEpochMatchesAnUninterruptedRunBitForBitWhicheverModeWroteOrReads) {
  const std::string whole = FreshDir("whole"), by_zero = FreshDir("by_zero"), by_plain = FreshDir("by_plain");
  const std::vector<std::string> common = {"--epochs=3", "--lr_schedule=cosine", "--seed=11"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const RunResult a = RunDdpMlp(Tiny(with({"--zero=1", "--checkpoint_dir=" + whole})));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);

  // Stopped in the middle of epoch 2 (step 26) by ZeRO-1, resumed by ZeRO-1.
  const RunResult b = RunDdpMlp(Tiny(with({"--zero=1", "--checkpoint_dir=" + by_zero, "--max_steps=26"})));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  ASSERT_TRUE(fs::exists(by_zero + "/step-00000026")) << b.out;
  const RunResult c = RunDdpMlp(Tiny(with({"--zero=1", "--checkpoint_dir=" + by_zero, "--resume"})));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_NE(c.out.find("resumed from " + by_zero + "/step-00000026"), std::string::npos) << c.out;
  ExpectSameCheckpoint(whole + "/step-00000057", by_zero + "/step-00000057", "ZeRO-1 stopped and resumed");

  // Stopped by plain DDP, resumed by ZeRO-1: the checkpoint is the same either way.
  const RunResult d = RunDdpMlp(Tiny(with({"--zero=0", "--checkpoint_dir=" + by_plain, "--max_steps=26"})));
  ASSERT_EQ(d.exit_code, 0) << Explain(d);
  const RunResult e = RunDdpMlp(Tiny(with({"--zero=1", "--checkpoint_dir=" + by_plain, "--resume"})));
  ASSERT_EQ(e.exit_code, 0) << Explain(e);
  ExpectSameCheckpoint(whole + "/step-00000057", by_plain + "/step-00000057", "plain DDP stopped, ZeRO-1 resumed");
}

}  // namespace
}  // namespace tinyddp::testing
