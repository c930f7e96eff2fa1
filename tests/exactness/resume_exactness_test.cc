// A run that stops and continues ends with the same bits as one that never stopped, at 3 and 4 ranks,
// for the whole state: the model, the optimizer state, and the progress (the sampler's position, the
// epoch's loss sums, DDP's bucket layout) with the settings (the seed, which with the progress is all
// the random state there is: examples/internal/train_checkpoint.h). //examples:ddp_mlp is run as a user
// runs it: real processes over Gloo, the tiny synthetic job of tests/ddp_mlp (a 32-24-10 MLP).
//
// Why the sums come out the same (docs/exactness.md): each rank's local gradient is a function of the
// weights and of its batch, and the resumed run feeds the same batches (the sampler is a function of
// seed, epoch and position) to the same weights. The all_reduce then adds the ranks' values of each
// element in an order fixed by the element's offset in its bucket (the ring chunk it falls in), so the
// same layout gives the same order. DDP's layout changes once, after a process's first synchronised step;
// the checkpoint records it and the resumed DDP starts from it (DdpOptions::bucket_order).
// The last test shows that this is what holds the bits: resumed from the same checkpoint without the
// layout, the run differs at 3 ranks, and at 2 ranks (one order: a + b) it does not.
//
// Built once per CPU kernel set (tools/cpu_isa_legs.bzl): the claim must hold on every CPU, and the
// child processes must say that they ran the leg's kernels.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/ddp_mlp/run_ddp_mlp.h"
#include "zlib.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kPreempted = 75;  // the exit status of a preempted job (examples/internal/preemption.h)

json Manifest(const std::string& checkpoint) {
  return json::parse(dist::testing::ReadFile(checkpoint + "/trainer_state.json"), nullptr, /*allow_exceptions=*/false);
}

// The whole state of two checkpoints is the same: both files byte for byte, and the manifest's progress
// and settings field by field.
void ExpectSameState(const std::string& expected, const std::string& actual) {
  ASSERT_FALSE(expected.empty());
  ASSERT_FALSE(actual.empty());
  EXPECT_EQ(fs::path(expected).filename(), fs::path(actual).filename()) << "they stopped at different steps";
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = dist::testing::ReadFile(expected + file);
    ASSERT_GT(want.size(), 1000u) << expected + file;
    EXPECT_TRUE(dist::testing::ReadFile(actual + file) == want) << actual + file << " differs from " << expected + file;
  }
  const json a = Manifest(expected), b = Manifest(actual);
  ASSERT_FALSE(a.is_discarded() || b.is_discarded());
  EXPECT_EQ(a.at("progress"), b.at("progress")) << "the sampler's position, the loss sums or DDP's layout differ";
  EXPECT_EQ(a.at("settings"), b.at("settings"));
  EXPECT_FALSE(a.at("progress").at("bucket_order").empty()) << "a DDP run past its first step records its layout";
}

class ResumeExactness : public ::testing::TestWithParam<int> {
 protected:
  // The tiny job on GetParam() ranks for 2 epochs, checkpointing into `dir`, plus `more`.
  std::vector<std::string> Job(const std::string& dir, std::vector<std::string> more) const {
    std::vector<std::string> flags = {absl::StrCat("--nproc=", GetParam()), "--epochs=2", "--seed=7",
                                      "--timeout=60s", "--checkpoint_dir=" + dir};
    flags.insert(flags.end(), more.begin(), more.end());
    return TinyJob("gloo", flags);
  }
  // Runs to the end and returns the final checkpoint. A run without faults is made once per binary and
  // flags (the uninterrupted reference several tests compare with).
  std::string RunToTheEnd(const std::string& name, const std::vector<std::string>& more,
                          const std::vector<std::pair<std::string, std::string>>& env = {}) {
    static std::map<std::string, std::string>* made = new std::map<std::string, std::string>;
    const std::string key = absl::StrCat(GetParam(), " ", absl::StrJoin(more, " "));
    if (env.empty() && made->count(key) > 0) return made->at(key);
    const std::string dir = FreshDir(absl::StrCat(name, "_", GetParam()));
    const RunResult r = RunDdpMlp(Job(dir, more), env);
    EXPECT_EQ(r.exit_code, 0) << Explain(r);
    ExpectLegKernels(r);
    if (env.empty() && r.exit_code == 0) (*made)[key] = NewestCheckpoint(dir);
    return NewestCheckpoint(dir);
  }
  // Stops after `steps` (--max_steps), then resumes in the same folder; returns the final checkpoint.
  std::string StopAndResume(const std::string& name, int steps, const std::vector<std::string>& more) {
    const std::string dir = FreshDir(absl::StrCat(name, "_", GetParam()));
    std::vector<std::string> first = more;
    first.push_back(absl::StrCat("--max_steps=", steps));
    const RunResult a = RunDdpMlp(Job(dir, first));
    EXPECT_EQ(a.exit_code, 0) << Explain(a);
    std::vector<std::string> second = more;
    second.push_back("--resume");
    const RunResult b = RunDdpMlp(Job(dir, second));
    EXPECT_EQ(b.exit_code, 0) << Explain(b);
    EXPECT_NE(b.out.find(absl::StrCat("resumed from ", dir, "/", CheckpointName(steps))), std::string::npos) << b.out;
    return NewestCheckpoint(dir);
  }
  // The children ran this leg's CPU kernels (tools/cpu_isa_legs.bzl passes TINYDDP_CPU_ISA down).
  static void ExpectLegKernels(const RunResult& r) {
    const char* leg = std::getenv("TINYDDP_CPU_ISA");
    if (leg != nullptr) EXPECT_NE(r.out.find(absl::StrCat("CPU kernels: ", leg)), std::string::npos) << r.out;
  }
};

TEST_P(ResumeExactness, StoppedAfterTheFirstStepBeforeTheBucketsRebuiltEndsBitIdentical) {
  // Step 1 recorded the gradient order; the rebuild it asks for has not happened yet. The checkpoint
  // records the layout the next step will use, and the resumed run starts with it.
  EXPECT_NO_FATAL_FAILURE(ExpectSameState(RunToTheEnd("whole", {}), StopAndResume("first", 1, {})));
}

TEST_P(ResumeExactness, StoppedMidEpochWithAdamWEndsBitIdentical) {
  const std::vector<std::string> adamw = {"--optimizer=adamw", "--lr=0.01"};
  EXPECT_NO_FATAL_FAILURE(ExpectSameState(RunToTheEnd("whole_adamw", adamw), StopAndResume("mid", 7, adamw)));
}

TEST_P(ResumeExactness, ARankKilledUnderMaxRestartsEndsBitIdentical) {
  const std::vector<std::string> every5 = {"--checkpoint_every=5"};
  const std::string whole = RunToTheEnd("whole_every5", every5);
  std::vector<std::string> restarted = every5;
  restarted.push_back("--max_restarts=1");
  // Rank 1 vanishes before step 8; the workers restart from the checkpoint of step 5.
  const std::string after = RunToTheEnd("restarted", restarted, {{"TINYDDP_FAULT", "rank=1,step=8,action=kill"}});
  EXPECT_NO_FATAL_FAILURE(ExpectSameState(whole, after));
}

TEST_P(ResumeExactness, PreemptedAtAKnownStepAndResumedEndsBitIdentical) {
  const std::string whole = RunToTheEnd("whole", {});
  const std::string dir = FreshDir(absl::StrCat("preempted_", GetParam()));
  // Before step 6 rank 0 sends SIGTERM to the process that started the ranks, as a scheduler would.
  const RunResult a = RunDdpMlp(Job(dir, {}), {{"TINYDDP_FAULT", "rank=0,step=6,action=preempt"}});
  ASSERT_EQ(a.exit_code, kPreempted) << Explain(a);
  const RunResult b = RunDdpMlp(Job(dir, {"--resume"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_NO_FATAL_FAILURE(ExpectSameState(whole, NewestCheckpoint(dir)));
}

TEST_P(ResumeExactness, ZeroOneAndZeroTwoStoppedAndResumedEndBitIdentical) {
  for (const std::string zero : {"--zero=1", "--zero=2"}) {
    SCOPED_TRACE(zero);
    const std::vector<std::string> flags = {zero, "--optimizer=adamw", "--lr=0.01"};
    EXPECT_NO_FATAL_FAILURE(ExpectSameState(RunToTheEnd("whole_z", flags), StopAndResume("z", 9, flags)));
  }
}

TEST_P(ResumeExactness, JoinWithUnevenShardsStoppedAndResumedEndsBitIdentical) {
  // 193 examples, no padding: the ranks have different numbers of batches and the short ones shadow.
  const std::vector<std::string> join = {"--join", "--synthetic_examples=193", "--log_every=1"};
  EXPECT_NO_FATAL_FAILURE(ExpectSameState(RunToTheEnd("whole_join", join), StopAndResume("join", 4, join)));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ResumeExactness, ::testing::Values(3, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

// A checkpoint as the previous format (version 2) wrote it: no layout, its own checksum recomputed.
void DropTheLayout(const std::string& checkpoint) {
  json j = Manifest(checkpoint);
  j["version"] = 2;
  j["progress"].erase("bucket_order");
  j.erase("crc32");
  const std::string text = j.dump();
  j["crc32"] = crc32(0, reinterpret_cast<const Bytef*>(text.data()), text.size());
  std::ofstream(checkpoint + "/trainer_state.json") << j.dump(2) << "\n";
}

TEST(ResumeExactnessWhy, WithoutTheLayoutAResumedRunDiffersAtThreeRanksButNotAtTwo) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(ranks, " ranks"));
    auto job = [&](const std::string& dir, const std::string& more) {
      return TinyJob("gloo", {absl::StrCat("--nproc=", ranks), "--epochs=2", "--seed=7", "--optimizer=adamw",
                              "--lr=0.01", "--checkpoint_dir=" + dir, more});
    };
    const std::string whole = FreshDir(absl::StrCat("why_whole_", ranks));
    ASSERT_EQ(RunDdpMlp(job(whole, "--log_every=5")).exit_code, 0);
    const std::string dir = FreshDir(absl::StrCat("why_", ranks));
    ASSERT_EQ(RunDdpMlp(job(dir, "--max_steps=7")).exit_code, 0);
    DropTheLayout(dir + "/" + CheckpointName(7));
    const RunResult resumed = RunDdpMlp(job(dir, "--resume"));
    ASSERT_EQ(resumed.exit_code, 0) << Explain(resumed);
    EXPECT_NE(resumed.out.find("no DDP bucket layout"), std::string::npos) << resumed.out;
    if (ranks == 2) {
      EXPECT_TRUE(SameModelAndOptimizer(NewestCheckpoint(whole), NewestCheckpoint(dir))) << "two ranks add each element in one order";
    } else {
      EXPECT_FALSE(SameModelAndOptimizer(NewestCheckpoint(whole), NewestCheckpoint(dir)))
          << "resumed in the first step's layout, the ring adds some elements in another order: the bits should "
             "differ, or this test no longer shows what holds them";
    }
  }
}

}  // namespace
}  // namespace tinyddp::testing
