// ddp_mlp --min_replicas=K, run as a user runs it: 4 real Gloo ranks on the tiny synthetic job, faults injected
// with TINYDDP_FAULT (base/fault_injection.h). The claims are in the test names; the exactness claim's reference
// is computed here: a run with all 4 replicas up to the failed step, then one with the survivors' membership
// (3 replicas) resumed from that step's state with the same data rule (dist/elastic/in_place/data_rule.h).
#include <string>
#include <vector>

#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

using dist::testing::ReadFile;

// 4 replicas of 32 examples a step over 2000 examples (15 full steps of 128 per epoch at 4, 20 at 3): the
// losses below happen mid-epoch, and 24 steps cross into the second epoch. --timeout bounds a frozen
// replica's detection.
std::vector<std::string> Job(int nproc, const std::string& checkpoint_dir, std::vector<std::string> more) {
  std::vector<std::string> flags = {"--dataset=synthetic", "--synthetic_examples=2000", "--synthetic_input_size=32",
                                    "--hidden=24,24",      "--batch_size=32",            "--backend=gloo",
                                    "--optimizer=adamw",   "--lr=0.01",                  "--log_every=4",
                                    "--timeout=4s",        "--recovery_window=8",        "--seed=3",
                                    "--nproc=" + std::to_string(nproc)};
  if (!checkpoint_dir.empty()) flags.push_back("--checkpoint_dir=" + checkpoint_dir);
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Everything a run's final in-place checkpoint holds: weights, optimizer state (AdamW's moments and step),
// and the progress (step, epoch, sample cursor, replicas). The data order and the learning rate are functions
// of (seed, epoch) and the step, so these are the whole random state too.
void ExpectSameState(const std::string& dir, const std::string& reference_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "/in_place-step-%08lld", static_cast<long long>(step));
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors", "/progress.txt"}) {
    const std::string want = ReadFile(reference_dir + name + file);
    ASSERT_FALSE(want.empty()) << reference_dir + name + file;
    EXPECT_TRUE(ReadFile(dir + name + file) == want) << file << " differs from the reference's";
  }
}

// The reference for a loss of one replica before step `k` of a run of `steps`: 4 replicas to step k, then 3
// from step k's state. Returns its checkpoint folder.
std::string Reference(int64_t k, int64_t steps) {
  const std::string dir = FreshDir("reference_" + std::to_string(k));
  const RunResult first = RunDdpMlp(Job(4, dir, {"--min_replicas=1", "--max_steps=" + std::to_string(k)}));
  EXPECT_EQ(first.exit_code, 0) << Explain(first);
  const RunResult rest =
      RunDdpMlp(Job(3, dir, {"--min_replicas=1", "--resume", "--max_steps=" + std::to_string(steps)}));
  EXPECT_EQ(rest.exit_code, 0) << Explain(rest);
  return dir;
}

TEST(InPlaceRecovery, AKilledAndAFrozenReplicaAreDroppedAndEachRunEndsBitIdenticalToTheSurvivorsReference) {
  const std::string reference = Reference(7, 24);
  // SIGKILL: replica 1 vanishes before step 7; replicas 0, 2, 3 become ranks 0, 1, 2 and redo step 7.
  const std::string killed = FreshDir("killed");
  const RunResult a = RunDdpMlp(Job(4, killed, {"--min_replicas=2", "--max_steps=24"}),
                                {{"TINYDDP_FAULT", "rank=1,step=7,action=kill"}});
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  EXPECT_TRUE(Has(a.out, "in-place recovery: generation 1: replicas 0,2,3 from step 7")) << a.out;
  EXPECT_TRUE(Has(a.out, "redoing step 7 with 3 replicas (global batch 96, lr unchanged)")) << a.out;
  EXPECT_TRUE(Has(a.out, "done: 24 steps with 3 replicas at the end")) << a.out;
  ExpectSameState(killed, reference, 24);
  // SIGSTOP: replica 1 freezes (its sockets stay open); the others' all_reduce times out after --timeout, and
  // the replica left out is fenced (SIGKILL) so that it cannot wake up and train on.
  const std::string frozen = FreshDir("frozen");
  const RunResult b = RunDdpMlp(Job(4, frozen, {"--min_replicas=2", "--max_steps=24"}),
                                {{"TINYDDP_FAULT", "rank=1,step=7,action=stop"}});
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_TRUE(Has(b.err, "fenced replica 1")) << b.err;
  EXPECT_TRUE(Has(b.out, "in-place recovery: generation 1: replicas 0,2,3 from step 7")) << b.out;
  ExpectSameState(frozen, reference, 24);
}

TEST(InPlaceRecovery, TwoLossesInARowLeaveTwoReplicasThatFinishTheRun) {
  const RunResult r = RunDdpMlp(Job(4, "", {"--min_replicas=2", "--max_steps=16"}),
                                {{"TINYDDP_FAULT", "rank=3,step=4,action=kill;rank=0,step=9,action=kill"}});
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  // Replica 0 (the first lead) is among the lost: replica 1 leads from generation 2 on.
  EXPECT_TRUE(Has(r.out, "generation 1: replicas 0,1,2 from step 4")) << r.out;
  EXPECT_TRUE(Has(r.out, "generation 2: replicas 1,2 from step 9")) << r.out;
  EXPECT_TRUE(Has(r.out, "done: 16 steps with 2 replicas at the end")) << r.out;
}

TEST(InPlaceRecovery, ALossDuringTheRecoveryIsSurvivedByTheNextGeneration) {
  // Replica 3 dies before step 4; replica 1 is counted in generation 1's quorum and dies before its group forms.
  const RunResult r = RunDdpMlp(Job(4, "", {"--min_replicas=2", "--max_steps=10"}),
                                {{"TINYDDP_FAULT", "rank=3,step=4,action=kill;rank=1,point=recovery,step=1,action=kill"}});
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_TRUE(Has(r.err, "building generation 1: replicas 0,1,2 from step 4")) << r.err;
  EXPECT_TRUE(Has(r.out, "generation 2: replicas 0,2 from step 4")) << r.out;
  EXPECT_TRUE(Has(r.out, "done: 10 steps with 2 replicas at the end")) << r.out;
}

TEST(InPlaceRecovery, FewerThanMinReplicasEndsTheJobNonZeroWithACheckpointOfTheLastCompletedStep) {
  const std::string dir = FreshDir("too_few");
  const RunResult r = RunDdpMlp(Job(4, dir, {"--min_replicas=3", "--max_steps=16"}),
                                {{"TINYDDP_FAULT", "rank=3,step=3,action=kill;rank=2,step=6,action=kill"}});
  EXPECT_NE(r.exit_code, 0) << Explain(r);
  EXPECT_TRUE(Has(r.err, "fewer than --min_replicas=3 replicas remain")) << r.err;
  EXPECT_FALSE(ReadFile(dir + "/in_place-step-00000006/model.safetensors").empty()) << Explain(r);
  EXPECT_TRUE(Has(ReadFile(dir + "/in_place-step-00000006/progress.txt"), "step 6\n"));
}

TEST(InPlaceRecovery, WithMaxRestartsFewerThanKRestartsTheWorldFromTheInPlaceCheckpoint) {
  // Two replicas die before the same step: 2 < K remain. The source checkpoints step 3, the survivors leave,
  // and the restart (round 1, where the faults do not fire) starts 4 replicas again from that checkpoint: the
  // world restart is the fallback (the replacement started for one of them is stopped with the round).
  const std::string dir = FreshDir("fallback");
  const RunResult r = RunDdpMlp(Job(4, dir, {"--min_replicas=3", "--max_steps=12", "--max_restarts=1"}),
                                {{"TINYDDP_FAULT", "rank=3,step=3,action=kill;rank=2,step=3,action=kill"}});
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_TRUE(Has(r.out, "in-place checkpoint: " + dir + "/in_place-step-00000003")) << r.out;
  EXPECT_TRUE(Has(r.out, "in-place recovery on (--min_replicas=3): 4 replicas, batch 32 per replica, step 3")) << r.out;
  EXPECT_TRUE(Has(r.out, "done: 12 steps with 4 replicas at the end")) << r.out;
}

// The step at which the group grew back, from the lead's line "rejoin: generation G: replicas ... from step S".
int64_t GrowthStep(const std::string& out) {
  const size_t at = out.find("rejoin: generation ");
  if (at == std::string::npos) return -1;
  const size_t from = out.find("from step ", at);
  return from == std::string::npos ? -1 : std::stoll(out.substr(from + 10));
}

TEST(InPlaceRecovery, AKilledReplicaIsReplacedWithinMaxRestartsAndTheRejoinIsBitIdenticalToItsReference) {
  // Replica 2 dies before step 5; the survivors redo it with 3; the launcher starts a replacement (a budget of
  // one, --max_restarts=1), which asks to join; the lead takes it in two steps after it saw the request, with
  // the live state of replica 0 (no checkpoint read). When is up to the replacement's start, so the reference
  // is built from the step the run reports: 4 replicas to step 5, 3 to the growth step, then 4 to the end.
  // Every replica pauses 3 s before step 9, so that the replacement has started and asked to join before the
  // run ends, however slowly the machine starts a process (the steps themselves take milliseconds).
  const std::string dir = FreshDir("rejoin");
  const RunResult r = RunDdpMlp(Job(4, dir, {"--min_replicas=2", "--max_steps=30", "--max_restarts=1"}),
                                {{"TINYDDP_FAULT", "rank=2,step=5,action=kill;rank=*,step=9,action=sleep,ms=3000"}});
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_TRUE(Has(r.err, "started a replacement for rank 2")) << r.err;
  EXPECT_TRUE(Has(r.out, "rejoin: replica 2 took the state of replica 0 at step")) << r.out;
  EXPECT_TRUE(Has(r.out, "done: 30 steps with 4 replicas at the end")) << r.out;
  const int64_t grown = GrowthStep(r.out);
  ASSERT_GT(grown, 5) << r.out;
  ASSERT_LT(grown, 30) << r.out;
  const std::string reference = FreshDir("rejoin_reference");
  for (const auto& [nproc, steps] : std::vector<std::pair<int, int64_t>>{{4, 5}, {3, grown}, {4, 30}}) {
    const RunResult part = RunDdpMlp(Job(nproc, reference, {"--min_replicas=1", "--resume",
                                                            "--max_steps=" + std::to_string(steps)}));
    ASSERT_EQ(part.exit_code, 0) << Explain(part);
  }
  ExpectSameState(dir, reference, 30);
}

TEST(InPlaceRecovery, BadCountsAndUnsupportedCombinationsAreRefusedBeforeAnyWorkerStarts) {
  const struct {
    std::vector<std::string> flags;
    const char* says;
  } cases[] = {
      {{"--min_replicas=5"}, "starts with only 4 data-parallel replica(s)"},
      {{"--min_replicas=-1"}, "must be at least 1"},
      {{"--min_replicas=2", "--zero=3"}, "--zero=3: each rank holds the only copy of its shard"},
      {{"--min_replicas=2", "--tp=2"}, "--tp: a replica would be a tensor-parallel row"},
      {{"--min_replicas=2", "--join"}, "--join:"},
  };
  for (const auto& c : cases) {
    const RunResult r = RunDdpMlp(Job(4, "", c.flags));
    EXPECT_EQ(r.exit_code, 2) << Explain(r);
    EXPECT_TRUE(Has(r.err, c.says)) << r.err;
    EXPECT_FALSE(Has(r.err, "starting 4 worker")) << r.err;
  }
}

}  // namespace
}  // namespace tinyddp::testing
