// //examples:ddp_mlp when things go wrong, run as a user runs it: the real binary starting its own 2 Gloo
// ranks (real processes, sockets, files) on the tiny synthetic job, with faults injected through
// TINYDDP_FAULT (base/fault_injection.h) and damage done to real files.
//
// The claims: a rank killed mid-run under --max_restarts=1 ends in exit 0 with a final model and
// optimizer state bit-identical to an uninterrupted run; a rank that dies is the one blamed, with its
// exit code, and the flight recorder keeps the records of the newest 5 such failed jobs, not 6; a NaN on one
// rank stops the run naming the step and that rank (and --allow_nonfinite
// trains on); an edited trainer state is refused and resume falls back; data that cannot train,
// unwritable outputs (with the permanent-failure status, 73), too many ranks and a bad TINYDDP_FAULT are
// refused before the first step.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using dist::testing::ReadFile;

std::vector<std::string> Tiny(const std::vector<std::string>& more) { return TinyJob("gloo", more); }

// The same run with `extra` flags: 3 epochs of 19 steps, cosine schedule, checkpoints every 10 steps.
std::vector<std::string> CheckpointedJob(const std::string& checkpoint_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--epochs=3", "--seed=5", "--checkpoint_dir=" + checkpoint_dir,
                                    "--checkpoint_every=10", "--timeout=20s"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return Tiny(flags);
}

void ExpectSameFinalState(const std::string& a, const std::string& b) {
  for (const char* file : {"/step-00000057/model.safetensors", "/step-00000057/optimizer.safetensors"}) {
    const std::string want = ReadFile(a + file);
    ASSERT_GT(want.size(), 1000u) << a + file;
    EXPECT_TRUE(ReadFile(b + file) == want) << file << " differs from the uninterrupted run's";
  }
}

TEST(DdpMlpFaults, AKilledRankUnderMaxRestartsEndsBitIdenticalToAnUninterruptedRun) {
  const std::string whole = FreshDir("restart_whole"), restarted = FreshDir("restart_killed");
  const RunResult a = RunDdpMlp(CheckpointedJob(whole));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  // Rank 1 vanishes (SIGKILL) before step 33, in epoch 2; the newest checkpoint then is step 30.
  const RunResult b =
      RunDdpMlp(CheckpointedJob(restarted, {"--max_restarts=1"}), {{"TINYDDP_FAULT", "rank=1,step=33,action=kill"}});
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_NE(b.err.find("spawn: round 0 failed: rank 1 (local rank 1, pid"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("failed first: signal SIGKILL (9) (sent from outside the job: the out-of-memory killer? see "
                       "dmesg); restarting all workers (restart 1 of 1"),
            std::string::npos)
      << b.err;
  EXPECT_NE(b.out.find("elastic restart 1 (TINYDDP_RESTART_COUNT=1): resuming from the last good checkpoint"),
            std::string::npos)
      << b.out;
  EXPECT_NE(b.out.find("resumed from " + restarted + "/step-00000030: epoch 2, batch 11, step 30"), std::string::npos)
      << b.out;
  ExpectSameFinalState(whole, restarted);
}

// The job folders in `tmpdir`'s flight-recorder directory (job_records.h).
int FlightRecorderJobFolders(const std::string& tmpdir) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmpdir + "/tinyddp-flight-recorder", ec)) {
    n += entry.is_directory() && entry.path().filename().string().rfind("job-", 0) == 0;
  }
  return n;
}

TEST(DdpMlpFaults, TheFlightRecorderKeepsTheRecordsOfTheNewestFiveFailedJobs) {
  // Six jobs in a row whose rank 1 dies in collective #5: each verdict points there, so each job's records
  // stay; the docs and the verdict's last line promise the newest 5.
  const std::string tmpdir = FreshDir("flight_recorder_tmp");
  for (int job = 1; job <= 6; ++job) {
    const RunResult r = RunDdpMlp(Tiny({"--epochs=1", "--timeout=20s"}),
                                  {{"TINYDDP_FAULT", "rank=1,point=collective,step=5,action=kill"}, {"TMPDIR", tmpdir}});
    ASSERT_NE(r.exit_code, 0) << Explain(r);
    ASSERT_NE(r.err.find("the newest 5 failed jobs' stay there"), std::string::npos) << "job " << job << "\n" << r.err;
    EXPECT_EQ(FlightRecorderJobFolders(tmpdir), std::min(job, 5)) << "after job " << job << "\n" << r.err;
  }
}

TEST(DdpMlpFaults, ARankThatDiesIsBlamedWithItsExitCode) {
  const RunResult r =
      RunDdpMlp(Tiny({"--epochs=1", "--timeout=20s"}), {{"TINYDDP_FAULT", "rank=1,step=7,action=exit,code=7"}});
  EXPECT_EQ(r.exit_code, 7) << Explain(r);
  EXPECT_NE(r.err.find("fault injection (TINYDDP_FAULT=rank=1,step=7,action=exit,code=7): rank 1, step 7: exit"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("spawn: job failed: rank 1 (local rank 1, pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed first: exit code 7; exiting with 7"), std::string::npos) << r.err;
}

TEST(DdpMlpFaults, ANanOnOneRankStopsTheRunNamingTheStepAndTheRank) {
  const RunResult r = RunDdpMlp(Tiny({"--epochs=1"}), {{"TINYDDP_FAULT", "rank=1,step=7,action=nan"}});
  EXPECT_EQ(r.exit_code, 1) << Explain(r);
  EXPECT_NE(r.err.find("ddp_mlp: rank 1: non-finite training loss (nan) at global step 7, on this rank first"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("ddp_mlp: rank 0: stopping: rank 1 saw a non-finite training loss at global step 7"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("spawn: job failed: rank 1"), std::string::npos) << "the rank that saw it is blamed\n" << r.err;
  EXPECT_EQ(r.out.find("epoch 1/1: train loss"), std::string::npos) << "no evaluation of a NaN model\n" << r.out;

  const RunResult allowed =
      RunDdpMlp(Tiny({"--epochs=1", "--allow_nonfinite"}), {{"TINYDDP_FAULT", "rank=1,step=7,action=nan"}});
  EXPECT_EQ(allowed.exit_code, 0) << Explain(allowed);
  EXPECT_NE(allowed.out.find("epoch 1/1: train loss nan"), std::string::npos) << allowed.out;
}

TEST(DdpMlpFaults, AnEditedTrainerStateIsRefusedAndResumeFallsBackToThePreviousCheckpoint) {
  const std::string whole = FreshDir("edit_whole"), parts = FreshDir("edit_parts");
  const RunResult a = RunDdpMlp(CheckpointedJob(whole));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const RunResult b = RunDdpMlp(CheckpointedJob(parts, {"--max_steps=19"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  // The byte flip: "epoch": 1 -> 3 would make --resume believe the run is over.
  const std::string state = parts + "/step-00000019/trainer_state.json";
  std::string text = ReadFile(state);
  const size_t at = text.find("\"epoch\": 1,");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 9] = '3';
  dist::testing::WriteFile(state, text);

  const RunResult c = RunDdpMlp(CheckpointedJob(parts, {"--resume"}));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_NE(c.out.find("refusing damaged checkpoint " + parts +
                       "/step-00000019: trainer_state.json fails its checksum"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("resumed from " + parts + "/step-00000010"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("nothing to train"), std::string::npos) << c.out;
  ExpectSameFinalState(whole, parts);
}

// Writes an IDX images file of n rows x cols images and its labels file (labels 0-9) into dir.
void WriteIdx(const std::string& dir, const std::string& split, int n, int rows, int cols) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  std::string images = be32(0x803) + be32(n) + be32(rows) + be32(cols);
  for (int i = 0; i < n * rows * cols; ++i) images.push_back(static_cast<char>((i * 37) % 251));
  std::string labels = be32(0x801) + be32(n);
  for (int i = 0; i < n; ++i) labels.push_back(static_cast<char>((i * 7) % 10));
  std::ofstream(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary) << images;
  std::ofstream(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary) << labels;
}

TEST(DdpMlpFaults, DataThatCannotTrainIsRefusedBeforeTheFirstStep) {
  const std::string tiny_images = FreshDir("one_pixel");
  WriteIdx(tiny_images, "train", 50, 1, 1);
  WriteIdx(tiny_images, "t10k", 20, 28, 28);
  const RunResult r = RunDdpMlp({"--data_dir=" + tiny_images, "--nproc=2", "--backend=gloo"});
  EXPECT_EQ(r.exit_code, 1) << Explain(r);
  EXPECT_NE(r.err.find("each training example has 1 values (1x1 images?) but each test example has 784 values "
                       "(28x28 images?)"),
            std::string::npos)
      << r.err;

  const std::string empty = FreshDir("no_train");
  WriteIdx(empty, "train", 0, 28, 28);
  WriteIdx(empty, "t10k", 20, 28, 28);
  const RunResult e = RunDdpMlp({"--data_dir=" + empty, "--nproc=2", "--backend=gloo"});
  EXPECT_EQ(e.exit_code, 1) << Explain(e);
  EXPECT_NE(e.err.find("the training split has no examples"), std::string::npos) << e.err;
  EXPECT_EQ(e.err.find("SIGABRT"), std::string::npos) << e.err;
}

TEST(DdpMlpFaults, UnwritableOutputsAreRefusedAtStartAndStaleTemporariesAreRemoved) {
  const std::string dir = FreshDir("outputs");
  dist::testing::WriteFile(dir + "/a_file", "in the way");
  // A folder that cannot be written stays so: the permanent-failure status (73), which is not restarted.
  const RunResult ckpt = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + dir + "/a_file/ckpt"}));
  EXPECT_EQ(ckpt.exit_code, 73) << Explain(ckpt);
  EXPECT_NE(ckpt.err.find("--checkpoint_dir=" + dir + "/a_file/ckpt: cannot create the folder"), std::string::npos)
      << ckpt.err;
  EXPECT_EQ(ckpt.out.find("step 5/19"), std::string::npos) << "found before training, not after an epoch";
  const RunResult trace = RunDdpMlp(Tiny({"--epochs=1", "--trace=" + dir + "/missing/trace.json"}));
  EXPECT_EQ(trace.exit_code, 73) << Explain(trace);
  EXPECT_NE(trace.err.find("--trace=" + dir + "/missing/trace.json: cannot write it (the folder " + dir +
                           "/missing does not exist)"),
            std::string::npos)
      << trace.err;
  EXPECT_EQ(trace.out.find("step 5/19"), std::string::npos);

  const std::string ckpt_dir = FreshDir("stale");
  fs::create_directories(ckpt_dir + "/.tmp-step-00000012-4242");
  const RunResult stale = RunDdpMlp(Tiny({"--epochs=1", "--max_steps=3", "--checkpoint_dir=" + ckpt_dir}));
  EXPECT_EQ(stale.exit_code, 0) << Explain(stale);
  EXPECT_NE(stale.out.find("removed " + ckpt_dir + "/.tmp-step-00000012-4242, a checkpoint left half-written"),
            std::string::npos)
      << stale.out;
  EXPECT_FALSE(fs::exists(ckpt_dir + "/.tmp-step-00000012-4242"));
}

TEST(DdpMlpFaults, TooManyRanksAndABadFaultSpecAreRefusedWithStatus2) {
  const RunResult many = RunDdpMlp(Tiny({"--epochs=1"}), {{"TINYDDP_NPROC", "100000"}});
  EXPECT_EQ(many.exit_code, 2) << Explain(many);
  EXPECT_NE(many.err.find("TINYDDP_NPROC=100000: 100000 workers do not fit on this machine"), std::string::npos)
      << many.err;
  EXPECT_NE(many.err.find("or pass --ignore_worker_limits"), std::string::npos) << many.err;
  const RunResult bad = RunDdpMlp(Tiny({"--epochs=1"}), {{"TINYDDP_FAULT", "rank=1,step=5,action=explode"}});
  EXPECT_EQ(bad.exit_code, 2) << Explain(bad);
  EXPECT_NE(bad.err.find("action=explode is not one of hang, exit, kill, nan"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tinyddp::testing
