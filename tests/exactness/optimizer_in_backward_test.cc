// ddp_mlp --optimizer_in_backward, run as a user runs it (3 Gloo ranks, the tiny synthetic job of tests/ddp_mlp):
// each bucket's optimizer steps as soon as its average has arrived, during backward, and the run ends with
// the bits the plain loop (optimizer.step() after backward) ends with: each element gets the same gradient,
// the same state and the same learning rate, only at another moment. Checkpoints are interchangeable: a run
// stopped with the flag resumes without it, and the other way round. What it does not serve is refused up
// front with the reason.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

// 3 ranks, several buckets (so that some update during backward), 2 epochs.
std::vector<std::string> Job(const std::string& dir, std::vector<std::string> more) {
  std::vector<std::string> flags = {"--nproc=3", "--epochs=2", "--seed=11", "--first_bucket_mb=0.001",
                                    "--bucket_cap_mb=0.002", "--checkpoint_dir=" + dir};
  flags.insert(flags.end(), more.begin(), more.end());
  return TinyJob("gloo", flags);
}

std::string TrainToTheEnd(const std::string& name, const std::vector<std::string>& more) {
  const std::string dir = FreshDir(name);
  const RunResult r = RunDdpMlp(Job(dir, more));
  EXPECT_EQ(r.exit_code, 0) << Explain(r);
  return NewestCheckpoint(dir);
}

TEST(OptimizerInBackward, EndsWithThePlainLoopsBitsForSgdAdamWBf16AndAccumulation) {
  const std::vector<std::vector<std::string>> setups = {
      {"--optimizer=sgd"},
      {"--optimizer=adamw", "--lr=0.01", "--precision=bf16"},
      {"--optimizer=adamw", "--lr=0.01", "--grad_accum_steps=2"},
  };
  int n = 0;
  for (const std::vector<std::string>& setup : setups) {
    SCOPED_TRACE(absl::StrJoin(setup, " "));
    const std::string plain = TrainToTheEnd(absl::StrCat("plain_", n), setup);
    std::vector<std::string> inside = setup;
    inside.push_back("--optimizer_in_backward");
    const std::string fused = TrainToTheEnd(absl::StrCat("inside_", n++), inside);
    ASSERT_FALSE(plain.empty());
    EXPECT_EQ(plain.substr(plain.rfind('/')), fused.substr(fused.rfind('/')));
    EXPECT_TRUE(SameModelAndOptimizer(plain, fused)) << plain << " vs " << fused;
  }
}

TEST(OptimizerInBackward, UnderZeroOneAndTwoEndsWithTheBitsOfTheShardsSteppedAfterBackward) {
  for (const char* zero : {"--zero=1", "--zero=2"}) {
    SCOPED_TRACE(zero);
    const std::vector<std::string> setup = {zero, "--optimizer=adamw", "--lr=0.01", "--grad_accum_steps=2"};
    const std::string after = TrainToTheEnd(absl::StrCat("after_", zero + 7), setup);
    std::vector<std::string> inside = setup;
    inside.push_back("--optimizer_in_backward");
    const std::string stepped_inside = TrainToTheEnd(absl::StrCat("in_", zero + 7), inside);
    ASSERT_FALSE(after.empty());
    EXPECT_TRUE(SameModelAndOptimizer(after, stepped_inside)) << after << " vs " << stepped_inside;
  }
}

TEST(OptimizerInBackward, ItsCheckpointsResumeWithoutTheFlagAndTheOtherWayRound) {
  const std::vector<std::string> adamw = {"--optimizer=adamw", "--lr=0.01"};
  const std::string plain = TrainToTheEnd("whole", adamw);
  for (bool first_inside : {true, false}) {
    SCOPED_TRACE(first_inside ? "stopped with the flag, resumed without" : "stopped without, resumed with");
    const std::string dir = FreshDir(absl::StrCat("mixed_", first_inside));
    std::vector<std::string> first = adamw, second = adamw;
    first.push_back("--max_steps=9");
    second.push_back("--resume");
    (first_inside ? first : second).push_back("--optimizer_in_backward");
    const RunResult a = RunDdpMlp(Job(dir, first));
    ASSERT_EQ(a.exit_code, 0) << Explain(a);
    if (first_inside) EXPECT_NE(a.out.find("optimizer inside backward"), std::string::npos) << a.out;
    const RunResult b = RunDdpMlp(Job(dir, second));
    ASSERT_EQ(b.exit_code, 0) << Explain(b);
    EXPECT_TRUE(SameModelAndOptimizer(plain, NewestCheckpoint(dir)));
  }
}

TEST(OptimizerInBackward, WhatItDoesNotServeIsRefusedSayingWhy) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--zero=3"}, "is not built for --zero=3"},
      {{"--ddp=bucketed"}, "--optimizer_in_backward applies to --ddp=full"},
      {{"--join"}, "is not built for --tp"},
      {{"--find_unused_parameters"}, "--find_unused_parameters"},
  };
  for (const auto& [flags, why] : refused) {
    std::vector<std::string> more = flags;
    more.push_back("--optimizer_in_backward");
    const RunResult r = RunDdpMlp(TinyJob("gloo", more));
    EXPECT_EQ(r.exit_code, 2) << Explain(r);
    EXPECT_NE(r.err.find(why), std::string::npos) << Explain(r);
  }
}

}  // namespace
}  // namespace tinyddp::testing
