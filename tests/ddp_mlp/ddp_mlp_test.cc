// //examples:ddp_mlp end to end, as a user runs it: the real binary started as a subprocess, starting
// its own 2 Gloo ranks (real processes, sockets, files) on the synthetic dataset with a tiny model.
//
// The claims: training learns (well above chance); a run stopped by --max_steps in the middle of an
// epoch and resumed ends with bit-identical weights and optimizer state to an uninterrupted run, also
// when the newest checkpoint is damaged and --resume falls back to the previous one; bad flags exit 2
// naming the flag; a resume under other settings is refused, as a permanent failure (73) that
// --max_restarts does not retry; a missing dataset names the path and the Debian package; --metrics_out writes JSON
// lines and the SVG plot; relative paths land in BUILD_WORKING_DIRECTORY.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tensor/cuda_device.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using dist::testing::ReadFile;

// The tiny synthetic job on 2 Gloo ranks, then `more`.
std::vector<std::string> Tiny(const std::vector<std::string>& more) { return TinyJob("gloo", more); }

// The newest step-* folder of a checkpoint dir.
std::string NewestCheckpoint(const std::string& dir) {
  std::string newest;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name > fs::path(newest).filename().string()) newest = e.path().string();
  }
  return newest;
}

constexpr int kStepsPerEpoch = kTinyStepsPerEpoch;

TEST(DdpMlp, TwoGlooRanksLearnTheSyntheticTaskWellAboveChance) {
  const std::string dir = FreshDir("learn");
  const RunResult r = RunDdpMlp(Tiny({"--epochs=3", "--lr_schedule=constant", "--metrics_out=" + dir + "/m.jsonl"}));
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_NE(r.out.find("2 rank(s) over gloo on cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 3/3: train loss"), std::string::npos) << r.out;
  // Plain lines (stdout is a file here), never the carriage-return bar. (Step lines come at most every
  // 10 s, so this short run may print none: progress_test checks them.)
  EXPECT_EQ(r.out.find('\r'), std::string::npos);

  double accuracy = -1, first_loss = -1, last_loss = -1;
  int epochs = 0;
  for (absl::string_view line : absl::StrSplit(ReadFile(dir + "/m.jsonl"), '\n', absl::SkipWhitespace())) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "epoch") {
      ++epochs;
      accuracy = j["test_accuracy"].get<double>();
      EXPECT_EQ(j["step"].get<int>(), epochs * kStepsPerEpoch);
    } else {
      if (first_loss < 0) first_loss = j["loss"].get<double>();
      last_loss = j["loss"].get<double>();
    }
  }
  EXPECT_EQ(epochs, 3);
  EXPECT_GT(accuracy, 0.35) << "10 classes: chance is 0.1\n" << r.out;
  EXPECT_LT(last_loss, 0.8 * first_loss);
  EXPECT_TRUE(fs::exists(dir + "/m.svg"));
}

TEST(DdpMlp, ResumingAfterMaxStepsMatchesAnUninterruptedRunBitForBit) {
  const std::string whole = FreshDir("whole"), parts = FreshDir("parts");
  const std::vector<std::string> common = {"--epochs=3", "--lr_schedule=cosine", "--seed=11"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const RunResult a = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + whole})));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);

  // Stop in the middle of epoch 2; the newest checkpoint is step 26, the one before it step 19.
  const RunResult b = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + parts, "--max_steps=26"})));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_NE(b.out.find("(stopped at --max_steps)"), std::string::npos) << b.out;
  ASSERT_TRUE(fs::exists(parts + "/step-00000026")) << b.out;
  ASSERT_TRUE(fs::exists(parts + "/step-00000019"));

  const RunResult c = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + parts, "--resume"})));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_NE(c.out.find("resumed from " + parts + "/step-00000026: epoch 2, batch 7, step 26"), std::string::npos)
      << c.out;

  const std::string end_a = whole + "/step-00000057", end_c = parts + "/step-00000057";
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = ReadFile(end_a + file);
    ASSERT_GT(want.size(), 1000u);
    EXPECT_TRUE(ReadFile(end_c + file) == want) << file << " differs after resuming mid-epoch";
  }
}

TEST(DdpMlp, Bf16RanksLearnCheckpointFloat32MastersAndResumeBitForBit) {
  // --precision=bf16: bfloat16 compute copies, float32 masters. A checkpoint holds the masters only;
  // resuming casts the copies from them, which gives exactly the copies the optimizer had written
  // (bf16(master) both ways), so the resumed run still matches the uninterrupted one bit for bit.
  const std::string whole = FreshDir("bf16_whole"), parts = FreshDir("bf16_parts");
  const std::vector<std::string> common = {"--precision=bf16", "--epochs=3", "--lr_schedule=cosine", "--seed=11"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const RunResult a = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + whole, "--metrics_out=" + whole + "/m.jsonl"})));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  EXPECT_NE(a.out.find("bf16 mixed precision"), std::string::npos) << a.out;
  EXPECT_GT(LastTestAccuracy(ReadFile(whole + "/m.jsonl")), 0.35) << "10 classes: chance is 0.1\n" << a.out;
  const std::string model = ReadFile(whole + "/step-00000057/model.safetensors");
  for (const char* name : {"0.weight", "0.bias", "2.weight", "2.bias"}) {
    EXPECT_NE(model.find(std::string("\"") + name + "\":{\"dtype\":\"F32\""), std::string::npos)
        << name << ": float32 masters under PyTorch's names";
  }
  EXPECT_EQ(model.find("BF16"), std::string::npos) << "no bfloat16 copy is saved";

  const RunResult b = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + parts, "--max_steps=26"})));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  const RunResult c = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + parts, "--resume"})));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    EXPECT_TRUE(ReadFile(parts + "/step-00000057" + file) == ReadFile(whole + "/step-00000057" + file))
        << file << " differs after resuming a bf16 run mid-epoch";
  }
  // A bf16 checkpoint does not continue as a float32 run (it would match neither).
  const RunResult fp32 = RunDdpMlp(Tiny({"--epochs=3", "--lr_schedule=cosine", "--seed=11", "--checkpoint_dir=" + parts,
                                         "--resume"}));
  EXPECT_NE(fp32.exit_code, 0);
  EXPECT_NE(fp32.err.find("--precision: checkpoint bf16, this run (not used)"), std::string::npos) << Explain(fp32);
}

TEST(DdpMlp, CudaGraphOnCpuRanksSaysWhyOnceAndTrainsExactlyAsWithoutIt) {
  // --cuda_graph cannot record CPU work: the run says so in one line and takes the eager loop, unchanged.
  const std::string eager = FreshDir("graph_off_eager"), asked = FreshDir("graph_off_asked");
  const RunResult a = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + eager}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const RunResult b = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + asked, "--cuda_graph"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  const std::string line = absl::StrCat("cuda graph: off, every step runs eagerly: ",
                                        cuda::BuiltWithCuda() ? "the step runs on the CPU"
                                                              : "this binary was built without CUDA");
  const size_t at = b.out.find(line);
  EXPECT_NE(at, std::string::npos) << b.out;
  EXPECT_EQ(b.out.find(line, at + 1), std::string::npos) << "said once, by rank 0:\n" << b.out;
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = ReadFile(eager + "/step-00000019" + file);
    ASSERT_GT(want.size(), 1000u);
    EXPECT_TRUE(ReadFile(asked + "/step-00000019" + file) == want) << file;
  }
}

TEST(DdpMlp, DamagedNewestCheckpointIsRefusedAndResumeUsesThePreviousOne) {
  const std::string whole = FreshDir("whole2"), parts = FreshDir("parts2");
  const std::vector<std::string> common = {"--epochs=2", "--lr_schedule=constant", "--optimizer=adamw", "--lr=0.003"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const RunResult a = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + whole})));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const RunResult b = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + parts, "--max_steps=30"})));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);

  // Damage the newest checkpoint's weights: one flipped bit in the middle.
  const std::string newest = NewestCheckpoint(parts);
  ASSERT_EQ(fs::path(newest).filename(), "step-00000030");
  std::string bytes = ReadFile(newest + "/model.safetensors");
  bytes[bytes.size() / 2] ^= 0x01;
  dist::testing::WriteFile(newest + "/model.safetensors", bytes);

  const RunResult c = RunDdpMlp(Tiny(with({"--checkpoint_dir=" + parts, "--resume"})));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_NE(c.out.find("refusing damaged checkpoint " + newest + ": model.safetensors fails its checksum"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("resumed from " + parts + "/step-00000019"), std::string::npos) << c.out;
  // Replaying from the earlier checkpoint still reproduces the uninterrupted run exactly.
  EXPECT_TRUE(ReadFile(parts + "/step-00000038/model.safetensors") ==
              ReadFile(whole + "/step-00000038/model.safetensors"));
}

TEST(DdpMlp, ResumeUnderDifferentSettingsIsRefused) {
  const std::string dir = FreshDir("settings");
  const RunResult b = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + dir, "--max_steps=4"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  const RunResult c = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + dir, "--resume", "--seed=3"}));
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.err.find("--seed: checkpoint 0, this run 3"), std::string::npos) << Explain(c);
  // A fresh run (no --resume) must not mix its checkpoints with the old run's, nor continue it through an
  // elastic restart (which resumes from the folder): a permanent failure, not restarted.
  const RunResult fresh = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + dir, "--max_restarts=1"}));
  EXPECT_EQ(fresh.exit_code, 73) << Explain(fresh);
  EXPECT_EQ(fresh.out.find("resumed from"), std::string::npos) << Explain(fresh);
  EXPECT_NE(fresh.err.find("already holds checkpoints of a run (newest: " + dir + "/step-00000004); pass --resume"),
            std::string::npos)
      << Explain(fresh);
  EXPECT_NE(fresh.err.find("rank 1: 1 other rank(s) failed while setting up"), std::string::npos) << Explain(fresh);
}

// A settings refusal can never succeed, however often the job is restarted: it is a permanent failure (73),
// which --max_restarts does not retry, and no collective's failure, on which the flight recorder has nothing
// to say. The case: a checkpoint of 2 ranks resumed at 3.
TEST(DdpMlp, ResumeAtAnotherNumberOfRanksIsRefusedAsPermanentAndNotRestarted) {
  const std::string dir = FreshDir("world_size");
  const RunResult a = RunDdpMlp(Tiny({"--epochs=1", "--checkpoint_dir=" + dir, "--max_steps=4"}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const std::string tmpdir = FreshDir("world_size_tmp");  // the flight recorder's folders go under $TMPDIR
  const RunResult b = RunDdpMlp(
      Tiny({"--epochs=1", "--checkpoint_dir=" + dir, "--resume", "--nproc=3", "--max_restarts=2"}), {{"TMPDIR", tmpdir}});
  EXPECT_EQ(b.exit_code, 73) << Explain(b);
  EXPECT_NE(b.err.find("world_size: checkpoint 2, this run 3"), std::string::npos) << Explain(b);
  EXPECT_NE(b.err.find("not restarting: exit code 73 means a permanent error"), std::string::npos) << b.err;
  EXPECT_EQ(b.err.find("restarting all workers"), std::string::npos) << b.err;
  // No collective was involved: the flight recorder says only that, and keeps nothing.
  EXPECT_NE(b.err.find("spawn: flight recorder: no collective was pending (the failure was not in one)"),
            std::string::npos)
      << b.err;
  EXPECT_EQ(b.err.find("flight recorder (pg0)"), std::string::npos) << "no verdict\n" << b.err;
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(tmpdir + "/tinyddp-flight-recorder", ec)) << "no records kept";
}

TEST(DdpMlp, InitFromStartsFromTheGivenWeightsAndRefusesMismatchedOnes) {
  const std::string dir = FreshDir("init_from");
  const RunResult trained =
      RunDdpMlp(Tiny({"--epochs=3", "--checkpoint_dir=" + dir + "/ck", "--metrics_out=" + dir + "/a.jsonl"}));
  ASSERT_EQ(trained.exit_code, 0) << Explain(trained);
  const std::string weights = dir + "/ck/step-00000057/model.safetensors";
  const RunResult warm = RunDdpMlp(Tiny({"--epochs=1", "--init_from=" + weights, "--metrics_out=" + dir + "/b.jsonl"}));
  ASSERT_EQ(warm.exit_code, 0) << Explain(warm);
  const double cold_start = FirstLoggedLoss(ReadFile(dir + "/a.jsonl"));
  const double warm_start = FirstLoggedLoss(ReadFile(dir + "/b.jsonl"));
  ASSERT_GT(cold_start, 2.0);  // about log(10) from a random init
  EXPECT_LT(warm_start, 0.7 * cold_start) << "--init_from did not start from the trained weights";

  // Weights of another shape: refused by every rank, naming the file and the parameter.
  const RunResult bad = RunDdpMlp(Tiny({"--epochs=1", "--hidden=16", "--init_from=" + weights}));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find(weights), std::string::npos) << Explain(bad);
  EXPECT_NE(bad.err.find("0.weight"), std::string::npos) << Explain(bad);
}

TEST(DdpMlp, BadFlagsExitWithStatus2AndSayWhichAndWhy) {
  const RunResult unknown = RunDdpMlp({"--epoch=3"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown flag --epoch"), std::string::npos) << unknown.err;
  const RunResult bad = RunDdpMlp({"--batch_size=many"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--batch_size=many: expected an integer"), std::string::npos) << bad.err;
  const RunResult range = RunDdpMlp({"--lr=0"});
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_NE(range.err.find("--lr: must be > 0"), std::string::npos) << range.err;
  // NCCL without a GPU is a flag error too (on a GPU machine --backend=nccl is simply valid).
  if (cuda::DeviceCount() == 0) {
    const RunResult nccl = RunDdpMlp({"--backend=nccl", "--dataset=synthetic"});
    EXPECT_EQ(nccl.exit_code, 2) << Explain(nccl);
    EXPECT_NE(nccl.err.find("--backend=nccl: "), std::string::npos) << nccl.err;
    EXPECT_NE(nccl.err.find("use --backend=gloo"), std::string::npos) << nccl.err;
  }
}

TEST(DdpMlp, MissingDatasetNamesThePathAndThePackage) {
  const RunResult r = RunDdpMlp({"--data_dir=/nonexistent/fmnist", "--nproc=2", "--backend=gloo"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/fmnist"), std::string::npos) << Explain(r);
  EXPECT_NE(r.err.find("dataset-fashion-mnist"), std::string::npos) << Explain(r);
  EXPECT_NE(r.err.find("Here: --data_dir=DIR."), std::string::npos) << Explain(r);
}

TEST(DdpMlp, RelativeOutputPathsLandInTheBuildWorkingDirectory) {
  const std::string wd = FreshDir("user_folder");
  const RunResult r = RunDdpMlp(Tiny({"--epochs=1", "--max_steps=5", "--metrics_out=out/metrics.jsonl"}),
                                {{"BUILD_WORKING_DIRECTORY", wd}});
  // out/ does not exist: the error must name the resolved path.
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(wd + "/out/metrics.jsonl"), std::string::npos) << Explain(r);
  fs::create_directories(wd + "/out");
  const RunResult ok = RunDdpMlp(Tiny({"--epochs=1", "--max_steps=5", "--metrics_out=out/metrics.jsonl"}),
                                 {{"BUILD_WORKING_DIRECTORY", wd}});
  ASSERT_EQ(ok.exit_code, 0) << Explain(ok);
  EXPECT_TRUE(fs::exists(wd + "/out/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(wd + "/out/metrics.svg"));
}

}  // namespace
}  // namespace tinyddp::testing
