// //examples:ddp_mlp's DDP knobs end to end (the real binary, 2 Gloo ranks, the tiny synthetic job):
// every rung of --ddp trains to the same weights as the production DDP; --grad_accum_steps=k with
// --batch_size=b trains to the weights of --batch_size=k*b (an epoch's short last batch included),
// --max_steps counts optimizer steps, and an accumulating run resumed mid-epoch ends bit-identical to one
// that never stopped; DDP's own settings reach DDP (the bucket table shows them).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "nn/checkpoint.h"
#include "nn/mlp.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

constexpr int kEpochs = 2;
const std::string kFinal = absl::StrCat("/step-000000", kEpochs * kTinyStepsPerEpoch, "/model.safetensors");

// The tiny job's model (32-24-10) holding the weights of checkpoint `path`.
std::shared_ptr<nn::Sequential> Load(const std::string& path) {
  auto model = nn::MLP({32, 24, 10});
  const absl::Status s = nn::LoadModule(*model, path);
  EXPECT_TRUE(s.ok()) << s;
  return model;
}

// Trains the tiny job with `more`, checkpointing into a fresh folder; returns the folder.
std::string Train(const std::string& name, std::vector<std::string> more) {
  const std::string dir = FreshDir(name);
  more.push_back("--checkpoint_dir=" + dir);
  more.push_back(absl::StrCat("--epochs=", kEpochs));
  more.push_back("--seed=5");
  const RunResult r = RunDdpMlp(TinyJob("gloo", more));
  EXPECT_EQ(r.exit_code, 0) << Explain(r);
  return dir;
}

TEST(DdpMlpLadder, EveryRungTrainsToTheWeightsOfTheProductionDdp) {
  const auto full = Load(Train("full", {"--ddp=full"}) + kFinal);
  ASSERT_FALSE(HasFailure());
  for (const std::string rung : {"naive", "flat", "bucketed"}) {
    std::vector<std::string> flags = {"--ddp=" + rung};
    if (rung == "bucketed") flags.push_back("--bucket_cap_mb=0.001");  // 1 KiB: two buckets
    const auto trained = Load(Train(rung, flags) + kFinal);
    ASSERT_FALSE(HasFailure());
    // After 38 SGD steps the float rounding of different summation orders has grown a little.
    dist::ddp_testing::ExpectParametersNear(*trained, *full, 1e-5, 1e-4, "--ddp=" + rung + " vs --ddp=full");
  }
}

TEST(DdpMlpLadder, AccumulatingKBatchesOfBTrainsLikeBatchesOfKTimesB) {
  // 600 examples per rank: 19 batches of 32 (the last one 24), or 38 of 16 taken two at a time (the
  // last pair 16 + 8): the same examples in every optimizer step.
  const auto large = Load(Train("large", {"--batch_size=32"}) + kFinal);
  ASSERT_FALSE(HasFailure());
  const std::string dir = Train("accumulated", {"--batch_size=16", "--grad_accum_steps=2"});
  dist::ddp_testing::ExpectParametersNear(*Load(dir + kFinal), *large, 1e-6, 1e-5, "2 x 16 accumulated vs 1 x 32");
  const auto naive = Load(Train("naive", {"--batch_size=8", "--grad_accum_steps=4", "--ddp=naive"}) + kFinal);
  dist::ddp_testing::ExpectParametersNear(*naive, *large, 1e-6, 1e-5, "4 x 8 accumulated (naive) vs 1 x 32");

  // --max_steps counts optimizer steps, not micro-batches.
  const std::string stopped = FreshDir("stopped");
  const RunResult r = RunDdpMlp(TinyJob("gloo", {"--batch_size=16", "--grad_accum_steps=2", "--max_steps=7",
                                                 "--checkpoint_dir=" + stopped}));
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_NE(r.out.find("x 2 accumulated (64 examples per optimizer step)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: 7 steps"), std::string::npos) << r.out;
}

TEST(DdpMlpLadder, ResumingAnAccumulatingRunMidEpochMatchesAnUninterruptedRunBitForBit) {
  // Progress counts optimizer steps: stopped after 26 of them (7 into epoch 2), a resumed run skips the
  // 2 x 7 batches of epoch 2 already trained and ends with the same bits as a run that never stopped.
  const std::vector<std::string> accumulate = {"--batch_size=16", "--grad_accum_steps=2", "--lr_schedule=cosine"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), accumulate.begin(), accumulate.end());
    return more;
  };
  const std::string whole = Train("whole", with({}));
  const std::string parts = FreshDir("parts");
  const RunResult stopped = RunDdpMlp(TinyJob("gloo", with({"--checkpoint_dir=" + parts, "--epochs=2", "--seed=5",
                                                             "--max_steps=26"})));
  ASSERT_EQ(stopped.exit_code, 0) << Explain(stopped);
  const RunResult resumed = RunDdpMlp(TinyJob("gloo", with({"--checkpoint_dir=" + parts, "--epochs=2", "--seed=5",
                                                             "--resume"})));
  ASSERT_EQ(resumed.exit_code, 0) << Explain(resumed);
  EXPECT_NE(resumed.out.find("epoch 2, batch 7, step 26"), std::string::npos) << resumed.out;
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string final_step = absl::StrCat("/step-000000", kEpochs * kTinyStepsPerEpoch);
    const std::string want = dist::testing::ReadFile(whole + final_step + file);
    ASSERT_GT(want.size(), 1000u);
    EXPECT_TRUE(dist::testing::ReadFile(parts + final_step + file) == want) << file << " differs after resuming";
  }
  // A checkpoint of an accumulating run does not continue without accumulation.
  const RunResult other = RunDdpMlp(TinyJob("gloo", {"--checkpoint_dir=" + parts, "--epochs=3", "--resume"}));
  EXPECT_NE(other.exit_code, 0) << Explain(other);
  EXPECT_NE(other.err.find("--grad_accum_steps"), std::string::npos) << Explain(other);
}

TEST(DdpMlpLadder, BucketSettingsReachDdpAndLowerRungsSayHowTheyCommunicate) {
  // A one-byte cap: every tensor of the 32-24-10 MLP (2 weights, 2 biases) closes a bucket of its own, and
  // DDP's bucket table, printed after the header, lists buckets 0 to 3.
  const RunResult full = RunDdpMlp(TinyJob("gloo", {"--max_steps=2", "--bucket_cap_mb=0.000001",
                                                    "--first_bucket_mb=0.000001"}));
  ASSERT_EQ(full.exit_code, 0) << Explain(full);
  EXPECT_NE(full.out.find("\n       3 "), std::string::npos) << "expected 4 buckets:\n" << full.out;
  EXPECT_EQ(full.out.find("\n       4 "), std::string::npos) << "expected 4 buckets:\n" << full.out;
  const RunResult naive = RunDdpMlp(TinyJob("gloo", {"--max_steps=2", "--ddp=naive"}));
  ASSERT_EQ(naive.exit_code, 0) << Explain(naive);
  EXPECT_NE(naive.out.find("naive DDP: after backward, 4 blocking all_reduces"), std::string::npos) << naive.out;
}

}  // namespace
}  // namespace tinyddp::testing
