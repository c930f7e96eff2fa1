// ddp_mlp preempted by a real Slurm (Debian's slurm-wlm 22.05, on a one-node cluster this test starts for
// itself: slurm_cluster.h). Under `srun -n2` every rank is a task of the step, so the signal reaches every
// rank, not a launcher. `scancel JOBID` is what a preemption or a time limit does to a job: SIGTERM to every
// task, then SIGKILL KillWait (30 s) later. The claims: every rank stops after the same step, one
// checkpoint is written, srun exits with 75 (the tasks' status); a second `srun -n2 ... --resume` ends with
// model and optimizer state bit-identical to `launch --nproc_per_node=2` never interrupted. (A SIGTERM to
// srun itself is not this: srun answers it by SIGKILLing the tasks at once, "forcing job termination".)
// Skipped, with the reason, without root or without the engines (tools/install_cluster_engines.sh).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_suite.h"
#include "tests/cluster/engines.h"
#include "tests/cluster/slurm_cluster.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr int kPreemptedExitCode = 75;  // dist/launch/supervisor.h
constexpr int kSteps = 2000;            // 2 epochs x 1000

// 2 epochs of 1000 steps of a few milliseconds (16000 synthetic examples, batch 8 on each of 2 ranks): the
// run lasts seconds. The signal goes out once rank 0 has logged step 50 to --metrics_out (flushed each
// --log_every steps): mid-epoch, and early, while the ranks still agree every few steps.
std::vector<std::string> LongJob(const std::string& checkpoint_dir) {
  return {"--dataset=synthetic", "--synthetic_examples=16000", "--synthetic_input_size=32", "--hidden=24",
          "--batch_size=8",      "--backend=gloo",             "--epochs=2",                 "--seed=3",
          "--log_every=50",      "--timeout=60s",              "--checkpoint_dir=" + checkpoint_dir,
          "--metrics_out=" + checkpoint_dir + ".jsonl"};
}

// Waits until rank 0 has logged a training step to the job's --metrics_out.
bool WaitForLoggedStep(const std::string& checkpoint_dir) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < deadline) {
    if (absl::StrContains(dist::testing::ReadFile(checkpoint_dir + ".jsonl"), "\"type\":\"step\"")) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

int64_t StepOf(const std::string& step_dir) {
  int64_t step = -1;
  const std::string name = fs::path(step_dir).filename().string();
  if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) return -1;
  return step;
}

class SlurmPreemption : public ClusterSuite<SlurmCluster> {
 protected:
  // srun -n2 ddp_mlp LongJob(checkpoint_dir) more..., as job `name` of the test cluster.
  std::vector<std::string> Srun(const std::string& name, const std::string& checkpoint_dir,
                                const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv = {FindProgram("srun"), "-n2", "--kill-on-bad-exit=1", "--job-name=" + name,
                                     Runfile("examples/ddp_mlp")};
    for (const std::string& flag : LongJob(checkpoint_dir)) argv.push_back(flag);
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
  }
};

TEST_F(SlurmPreemption, ScancelMidEpochUnderSrunCheckpointsExits75AndResumesBitIdentical) {
  // What the runs must end with: launch --nproc_per_node=2 of the same job, never interrupted.
  std::vector<std::string> reference = {Runfile("dist/launch/launch"), "--nproc_per_node=2",
                                        Runfile("examples/ddp_mlp")};
  for (const std::string& flag : LongJob(dir_ + "/whole")) reference.push_back(flag);
  const CommandResult whole = RunCommand(reference, {}, dir_, seconds(180));
  ASSERT_EQ(whole.exit_code, 0) << whole.Explain();
  ASSERT_EQ(StepOf(LatestCheckpoint(dir_ + "/whole")), kSteps) << whole.Explain();

  const std::string checkpoints = dir_ + "/srun";
  const pid_t srun = StartCommand(Srun("preempted", checkpoints), cluster_->ClientEnv(), dir_, "srun");
  const bool started = WaitForLoggedStep(checkpoints);
  const CommandResult cancel =
      RunCommand({FindProgram("scancel"), "--name=preempted"}, cluster_->ClientEnv(), dir_, seconds(30));
  const CommandResult stopped = WaitCommand(srun, dir_, "srun", seconds(120));
  ASSERT_TRUE(started) << "no step logged\n" << stopped.Explain();
  ASSERT_EQ(cancel.exit_code, 0) << cancel.Explain();
  EXPECT_EQ(stopped.exit_code, kPreemptedExitCode) << stopped.Explain();
  EXPECT_TRUE(absl::StrContains(stopped.out, "preempted: SIGTERM reached the job, every rank stopped after step "))
      << stopped.Explain();
  const std::string at = LatestCheckpoint(checkpoints);
  std::printf("scancel under srun after step 50: every rank stopped after step %lld of %d\n",
              static_cast<long long>(StepOf(at)), kSteps);
  EXPECT_GT(StepOf(at), 50) << "a checkpoint where the ranks stopped\n" << stopped.Explain();
  EXPECT_LT(StepOf(at), kSteps) << "the run was stopped, not finished\n" << stopped.Explain();
  EXPECT_NE(StepOf(at) % 1000, 0) << "mid-epoch, not at an epoch's end\n" << stopped.Explain();

  // Run again (as a requeued job would), resuming.
  const CommandResult resumed = Run(Srun("resumed", checkpoints, {"--resume"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.Explain();
  EXPECT_TRUE(absl::StrContains(resumed.out, absl::StrCat("resumed from ", at, ": "))) << resumed.Explain();
  EXPECT_EQ(CompareCheckpoints(LatestCheckpoint(dir_ + "/whole"), LatestCheckpoint(checkpoints)), "")
      << resumed.Explain();
}

}  // namespace
}  // namespace tinyddp::testing
