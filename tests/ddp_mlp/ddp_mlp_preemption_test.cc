// //examples:ddp_mlp preempted, as a cluster preempts it (examples/internal/preemption.h): real processes,
// real signals, 2 Gloo ranks on a synthetic job of 2 epochs of 1000 short steps. The engine's signal reaches
// the process that started the ranks: `launch`, as under sbatch's script or as a pod's PID 1, or ddp_mlp
// itself when it started its own ranks. (tests/cluster/slurm_preemption_test.cc has srun, where every rank
// gets it.) The claims:
//   - a SIGTERM to launch mid-epoch: every rank stops after one step, one checkpoint is written, the job
//     exits with 75 and --max_restarts=1 does not restart it; --resume then ends with model and optimizer
//     state bit-identical to a run never interrupted;
//   - a SIGUSR1 (Slurm's --signal=USR1@T before a time limit) to ddp_mlp started directly: the same status,
//     no restart, and the checkpoint is where the run stopped;
//   - a second signal while the ranks stop (SIGTERM after Slurm's SIGUSR1, SIGTERM twice) changes nothing:
//     the same one checkpoint, exit 75 and bit-identical resume as after one signal, no SIGKILL;
//   - a disk that fills up under the stop checkpoint ends the job with the permanent status (73), under launch
//     and under ddp_mlp's own launcher: a restart policy keyed on exit codes must not retry it.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"
#include "tests/ddp_mlp/small_disk.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
namespace t = dist::testing;
using std::chrono::seconds;

constexpr int kPreemptedExitCode = 75;  // dist/launch/supervisor.h
constexpr int kPermanentFailureExitCode = 73;  // likewise
constexpr int kSteps = 2000;            // 2 epochs x 1000

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir != nullptr ? srcdir : ".") + "/" + (workspace != nullptr ? workspace : "tinyddp") + "/" +
         path;
}

// 16000 synthetic examples, batch 8 per rank on 2 ranks: 2 epochs of 1000 steps of a few milliseconds, so
// the run lasts seconds. The signal goes out once rank 0 has logged step 50 to --metrics_out (one line per
// --log_every steps, flushed): mid-epoch, and early, while the ranks still agree every few steps (the
// interval doubles from 1), so they stop within the epoch however fast this machine is.
std::vector<std::string> LongJob(const std::string& checkpoint_dir) {
  return {"--dataset=synthetic", "--synthetic_examples=16000", "--synthetic_input_size=32", "--hidden=24",
          "--batch_size=8",      "--backend=gloo",             "--epochs=2",                 "--seed=3",
          "--log_every=50",      "--timeout=60s",              "--checkpoint_dir=" + checkpoint_dir,
          "--metrics_out=" + checkpoint_dir + ".jsonl"};
}

// Waits until `file` holds `text` (a bound, not a measurement: false after 2 minutes).
bool WaitForText(const std::string& file, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < deadline) {
    if (absl::StrContains(t::ReadFile(file), text)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Waits until rank 0 has logged a training step to the job's --metrics_out.
bool WaitForLoggedStep(const std::string& checkpoint_dir) {
  return WaitForText(checkpoint_dir + ".jsonl", "\"type\":\"step\"");
}

struct Started {
  pid_t pid = -1;
  std::string out, err;  // paths
};

Started Start(std::vector<std::string> argv) {
  static int counter = 0;
  const std::string dir = t::MakeTempDir();
  Started s;
  s.out = absl::StrCat(dir, "/out", counter, ".txt");
  s.err = absl::StrCat(dir, "/err", counter++, ".txt");
  std::vector<std::string> unset = t::LauncherVariables();
  unset.push_back("BUILD_WORKING_DIRECTORY");
  s.pid = t::StartProcess(argv, {}, unset, s.out, s.err);
  return s;
}

RunResult Finish(const Started& s) {
  const std::optional<int> status = t::WaitFor(s.pid, std::chrono::minutes(3));
  RunResult r;
  r.out = t::ReadFile(s.out);
  r.err = t::ReadFile(s.err);
  if (status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  return r;
}

std::vector<std::string> Launch(const std::vector<std::string>& launch_flags, const std::vector<std::string>& job) {
  std::vector<std::string> argv = {Runfile("dist/launch/launch"), "--nproc_per_node=2"};
  argv.insert(argv.end(), launch_flags.begin(), launch_flags.end());
  argv.push_back(Runfile("examples/ddp_mlp"));
  argv.insert(argv.end(), job.begin(), job.end());
  return argv;
}

// The newest step-* folder's step (-1 when none).
int64_t LatestStep(const std::string& checkpoint_dir) {
  int64_t latest = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    int64_t step = 0;
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "step-") && absl::SimpleAtoi(name.substr(5), &step) && step > latest) latest = step;
  }
  return latest;
}

std::string StepDir(const std::string& checkpoint_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "/step-%08lld", static_cast<long long>(step));
  return checkpoint_dir + name;
}

// How many step-* folders (checkpoints) there are.
int CountCheckpoints(const std::string& checkpoint_dir) {
  int count = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    count += absl::StartsWith(entry.path().filename().string(), "step-");
  }
  return count;
}

void ExpectSameState(const std::string& expected, const std::string& actual) {
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = t::ReadFile(expected + file);
    ASSERT_GT(want.size(), 1000u) << expected + file;
    EXPECT_TRUE(t::ReadFile(actual + file) == want) << actual + file << " differs from the uninterrupted run's";
  }
}

// The job run once without interruption (under launch), for the tests to compare with: its folder, or ""
// after a failure, which this reports.
const std::string& UninterruptedRun() {
  static const std::string* whole = [] {
    const std::string dir = FreshDir("whole");
    const RunResult a = Finish(Start(Launch({}, LongJob(dir))));
    EXPECT_EQ(a.exit_code, 0) << Explain(a);
    EXPECT_EQ(LatestStep(dir), kSteps) << Explain(a);
    return new std::string(a.exit_code == 0 && LatestStep(dir) == kSteps ? dir : "");
  }();
  return *whole;
}

TEST(DdpMlpPreemption, ASigtermToLaunchMidEpochCheckpointsExits75AndResumesBitIdentical) {
  const std::string whole = UninterruptedRun(), preempted = FreshDir("preempted");
  ASSERT_FALSE(whole.empty()) << "the uninterrupted run failed";

  // The same job under --max_restarts=1, told to stop once it has logged step 50.
  const Started b = Start(Launch({"--max_restarts=1"}, LongJob(preempted)));
  ASSERT_TRUE(WaitForLoggedStep(preempted)) << Explain(Finish(b));
  ASSERT_EQ(::kill(b.pid, SIGTERM), 0);
  const RunResult stopped = Finish(b);
  EXPECT_EQ(stopped.exit_code, kPreemptedExitCode) << Explain(stopped);
  EXPECT_TRUE(absl::StrContains(stopped.err, "SIGKILL after 30s")) << "the preemption grace\n" << stopped.err;
  EXPECT_TRUE(absl::StrContains(stopped.out, "preempted: SIGTERM reached the job, every rank stopped after step "))
      << Explain(stopped);
  EXPECT_TRUE(absl::StrContains(stopped.err, "launch: job preempted")) << stopped.err;
  EXPECT_FALSE(absl::StrContains(stopped.err, "restarting")) << "exit 75 is not restarted\n" << stopped.err;
  const int64_t at = LatestStep(preempted);
  std::printf("SIGTERM to launch after step 50: every rank stopped after step %lld of %d\n",
              static_cast<long long>(at), kSteps);
  EXPECT_GT(at, 50) << "a checkpoint where the ranks stopped\n" << Explain(stopped);
  EXPECT_LT(at, kSteps) << "the run was stopped, not finished\n" << Explain(stopped);
  EXPECT_NE(at % 1000, 0) << "mid-epoch, not at an epoch's end\n" << Explain(stopped);
  EXPECT_TRUE(absl::StrContains(stopped.out, absl::StrCat("checkpoint: ", StepDir(preempted, at))))
      << Explain(stopped);

  std::vector<std::string> resume = LongJob(preempted);
  resume.push_back("--resume");
  const RunResult c = Finish(Start(Launch({}, resume)));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_TRUE(absl::StrContains(c.out, absl::StrCat("resumed from ", StepDir(preempted, at), ": "))) << c.out;
  ExpectSameState(StepDir(whole, kSteps), StepDir(preempted, kSteps));
}

TEST(DdpMlpPreemption, ASigusr1ToDdpMlpStartedDirectlyCheckpointsExits75AndIsNotRestarted) {
  const std::string dir = FreshDir("direct");
  std::vector<std::string> argv = {Runfile("examples/ddp_mlp"), "--nproc=2", "--max_restarts=1"};
  for (const std::string& flag : LongJob(dir)) argv.push_back(flag);
  const Started s = Start(argv);
  ASSERT_TRUE(WaitForLoggedStep(dir)) << Explain(Finish(s));
  ASSERT_EQ(::kill(s.pid, SIGUSR1), 0);  // to the process that started the ranks, which forwards SIGTERM
  const RunResult r = Finish(s);
  EXPECT_EQ(r.exit_code, kPreemptedExitCode) << Explain(r);
  EXPECT_TRUE(absl::StrContains(r.out, "preempted: SIGTERM reached the job")) << Explain(r);
  EXPECT_TRUE(absl::StrContains(r.err, "SIGKILL after 30s")) << "the preemption grace\n" << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "spawn: job preempted: interrupted by SIGUSR1")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "restarting")) << r.err;
  const int64_t at = LatestStep(dir);
  std::printf("SIGUSR1 to ddp_mlp after step 50: every rank stopped after step %lld of %d\n",
              static_cast<long long>(at), kSteps);
  EXPECT_GT(at, 50) << Explain(r);
  EXPECT_LT(at, kSteps) << Explain(r);
}

// Slurm's --signal=USR1@N sends SIGUSR1 before the time limit and SIGTERM at it; a scancel may come twice.
// The second signal goes to the process that started the ranks once it has said it is stopping them for
// the first, so within the first one's grace: it must not cut the grace short. (Not both at once: the
// kernel keeps one pending SIGTERM, and two pending signals may be taken in either order.)
TEST(DdpMlpPreemption, ASecondSignalDuringTheGraceEndsTheJobAsOneSignalDoes) {
  const std::string whole = UninterruptedRun();
  ASSERT_FALSE(whole.empty()) << "the uninterrupted run failed";

  struct Case {
    const char* name;
    bool under_launch;  // else ddp_mlp started directly (its own launcher, spawn)
    std::vector<int> signals;
  };
  for (const Case& c : {Case{"usr1_then_term", true, {SIGUSR1, SIGTERM}}, Case{"term_twice", false, {SIGTERM, SIGTERM}}}) {
    SCOPED_TRACE(c.name);
    const std::string dir = FreshDir(c.name);
    std::vector<std::string> argv = Launch({"--max_restarts=1"}, LongJob(dir));
    if (!c.under_launch) {
      argv = {Runfile("examples/ddp_mlp"), "--nproc=2", "--max_restarts=1"};
      for (const std::string& flag : LongJob(dir)) argv.push_back(flag);
    }
    const Started s = Start(argv);
    ASSERT_TRUE(WaitForLoggedStep(dir)) << Explain(Finish(s));
    ASSERT_EQ(::kill(s.pid, c.signals[0]), 0);
    ASSERT_TRUE(WaitForText(s.err, absl::StrCat("interrupted by SIG", ::sigabbrev_np(c.signals[0]))))
        << Explain(Finish(s));
    ASSERT_EQ(::kill(s.pid, c.signals[1]), 0);
    const RunResult stopped = Finish(s);
    EXPECT_EQ(stopped.exit_code, kPreemptedExitCode) << Explain(stopped);
    EXPECT_TRUE(absl::StrContains(stopped.err, "SIGTERM while the workers stop: they keep their grace"))
        << stopped.err;
    EXPECT_TRUE(absl::StrContains(stopped.out, "preempted: SIGTERM reached the job, every rank stopped after step "))
        << Explain(stopped);
    EXPECT_FALSE(absl::StrContains(stopped.err, "SIGKILL (9)")) << stopped.err;
    EXPECT_FALSE(absl::StrContains(stopped.err, "died or froze")) << "no flight-recorder verdict\n" << stopped.err;
    EXPECT_EQ(CountCheckpoints(dir), 1) << "one stop checkpoint\n" << Explain(stopped);
    const int64_t at = LatestStep(dir);
    EXPECT_GT(at, 50) << Explain(stopped);
    EXPECT_LT(at, kSteps) << Explain(stopped);

    std::vector<std::string> resume = LongJob(dir);
    resume.push_back("--resume");
    const RunResult resumed = Finish(Start(Launch({}, resume)));
    ASSERT_EQ(resumed.exit_code, 0) << Explain(resumed);
    EXPECT_TRUE(absl::StrContains(resumed.out, absl::StrCat("resumed from ", StepDir(dir, at), ": "))) << resumed.out;
    ExpectSameState(StepDir(whole, kSteps), StepDir(dir, kSteps));
  }
}

// The stop checkpoint is the first this job writes (no --checkpoint_every; an epoch is 1000 steps): on a
// tmpfs of 8 KiB it finds room for the model's file, not for the optimizer's, and rank 0 fails with the
// permanent status. That, not the signal that started the stop, is how the job ended.
TEST(DdpMlpPreemption, AFullDiskUnderTheStopCheckpointEndsWithThePermanentStatus) {
  struct Case {
    const char* name;
    bool under_launch;  // else ddp_mlp started directly (its own launcher, spawn)
  };
  for (const Case& c : {Case{"full_under_launch", true}, Case{"full_under_spawn", false}}) {
    SCOPED_TRACE(c.name);
    const std::string dir = FreshDir(c.name) + "/checkpoints";  // its --metrics_out beside it, off the tmpfs
    if (const std::string why = MountTmpfs(dir, 8192, false); !why.empty()) GTEST_SKIP() << "needs a tmpfs: " << why;
    std::vector<std::string> argv = Launch({"--max_restarts=1"}, LongJob(dir));
    if (!c.under_launch) {
      argv = {Runfile("examples/ddp_mlp"), "--nproc=2", "--max_restarts=1"};
      for (const std::string& flag : LongJob(dir)) argv.push_back(flag);
    }
    const Started s = Start(argv);
    ASSERT_TRUE(WaitForLoggedStep(dir)) << Explain(Finish(s));
    ASSERT_EQ(::kill(s.pid, SIGTERM), 0);
    const RunResult r = Finish(s);
    EXPECT_EQ(r.exit_code, kPermanentFailureExitCode) << Explain(r);
    EXPECT_TRUE(absl::StrContains(r.err, "No space left on device")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "exit code 73 (a permanent error) while the job stopped")) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "restarting")) << r.err;
    EXPECT_FALSE(absl::StrContains(r.out, "preempted:")) << "no checkpoint, no preemption\n" << r.out;
    EXPECT_TRUE(absl::StrContains(r.err, "flight recorder: no collective was pending (the failure was not in one)"))
        << "a full disk is no collective's failure\n" << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "flight recorder (pg0)")) << r.err;
  }
}

}  // namespace
}  // namespace tinyddp::testing
