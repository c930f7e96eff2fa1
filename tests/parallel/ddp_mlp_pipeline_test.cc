// //examples:ddp_mlp --pp end to end, as a user runs it (Gloo ranks, the tiny synthetic job of tests/ddp_mlp with
// four Linears: 32-24-16-12-10).
//
// The reference is one process at --pp=1 with --microbatches=4: each batch of 32 cut into 4 microbatches whose
// gradients accumulate before one step. GPipe, 1F1B, ZB-H1 and interleaved 1F1B (v = 2) over 2 pipeline ranks write
// the reference's checkpoint byte for byte (model and optimizer state, SGD and AdamW): every stage sums its
// microbatches' gradients in microbatch order, with the same GEMMs on the same rows (docs/pipeline_parallel.md).
// 2 replicas x 2 stages (4 ranks) write 2 replicas' checkpoint byte for byte too, with --zero=1 as well. The checkpoint is one
// process's, resumes at another --pp, and the run prints its mesh, its schedule and its measured bubble. The 3-D
// mesh (--pp with --tp) trains like one process within tensor parallelism's reassociation. Bad layouts are
// refused with the flag and the fix.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nn/safetensors.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

constexpr int kSteps = 10;

std::string Train(const std::string& name, std::vector<std::string> flags) {
  const std::string dir = FreshDir(name);
  flags.insert(flags.end(), {"--hidden=24,16,12", "--epochs=1", "--max_steps=10", "--checkpoint_dir=" + dir});
  const RunResult r = RunDdpMlp(TinyJob("gloo", flags));
  EXPECT_EQ(r.exit_code, 0) << Explain(r);
  return dir + "/" + CheckpointName(kSteps);
}

TEST(PipelineDdpMlp, EveryScheduleWritesTheOneProcessMicrobatchedCheckpointByteForByte) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    const std::vector<std::string> common = {"--optimizer=" + optimizer, "--seed=3", "--microbatches=4",
                                             optimizer == "adamw" ? "--lr=0.01" : "--lr=0.2"};
    auto with = [&](std::vector<std::string> more) {
      more.insert(more.begin(), common.begin(), common.end());
      return more;
    };
    const std::string one = Train("pp_one_" + optimizer, with({"--nproc=1"}));
    for (const std::string schedule : {"gpipe", "1f1b", "zb"}) {
      const std::string pp = Train("pp_" + schedule + "_" + optimizer, with({"--nproc=2", "--pp=2",
                                                                              "--pp_schedule=" + schedule}));
      EXPECT_TRUE(SameModelAndOptimizer(one, pp)) << "--pp=2 --pp_schedule=" << schedule << " against one process";
    }
    const std::string interleaved = Train("pp_interleaved_" + optimizer,
                                          with({"--nproc=2", "--pp=2", "--pp_schedule=interleaved",
                                                "--pp_virtual_stages=2"}));
    EXPECT_TRUE(SameModelAndOptimizer(one, interleaved)) << "interleaved against one process";
    const std::string other = Train("pp_other_m_" + optimizer, with({"--nproc=1", "--microbatches=2"}));
    EXPECT_FALSE(SameModelAndOptimizer(one, other)) << "another microbatching sums in another order: not the same bits";
  }
  // Data parallel down the mesh's columns: 2 replicas x 2 stages against 2 replicas of the whole model.
  const std::vector<std::string> adamw = {"--optimizer=adamw", "--lr=0.01", "--seed=5", "--microbatches=4"};
  std::vector<std::string> replicas = adamw, mesh = adamw;
  replicas.push_back("--nproc=2");
  mesh.insert(mesh.end(), {"--nproc=4", "--pp=2"});
  const std::string two_replicas = Train("pp_replicas", replicas);
  EXPECT_TRUE(SameModelAndOptimizer(two_replicas, Train("pp_mesh", mesh)));
  mesh.push_back("--zero=1");  // each stage's optimizer state split over its 2 replicas: the same bits
  EXPECT_TRUE(SameModelAndOptimizer(two_replicas, Train("pp_mesh_zero1", mesh)));
}

TEST(PipelineDdpMlp, PrintsItsMeshScheduleAndBubbleAndResumesAtAnotherPp) {
  const std::string dir = FreshDir("pp_resume");
  const std::vector<std::string> job = {"--hidden=24,16,12", "--epochs=1", "--microbatches=4", "--optimizer=adamw",
                                        "--lr=0.01", "--checkpoint_dir=" + dir};
  std::vector<std::string> first = job;
  first.insert(first.end(), {"--nproc=2", "--pp=2", "--max_steps=6"});
  const RunResult a = RunDdpMlp(TinyJob("gloo", first));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  EXPECT_NE(a.out.find("mesh 1 x 2 (data-parallel replicas x pipeline stages): rank 0 replica 0 stage 0; rank 1 "
                       "replica 0 stage 1"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("rank 0 | 0F0 0F1 .   0B0 0F2 0B1 0F3 0B2 .   0B3"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("pipeline bubble, last step"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("formula 20.0%"), std::string::npos) << a.out;
  // Resumed by one process at --pp=1 to step 10: the checkpoint of a run that went there at --pp=2.
  std::vector<std::string> second = job;
  second.insert(second.end(), {"--nproc=1", "--max_steps=10", "--resume"});
  const RunResult b = RunDdpMlp(TinyJob("gloo", second));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  std::vector<std::string> straight = {"--optimizer=adamw", "--lr=0.01", "--microbatches=4", "--nproc=2", "--pp=2"};
  EXPECT_TRUE(SameModelAndOptimizer(dir + "/" + CheckpointName(kSteps), Train("pp_straight", straight)));
}

TEST(PipelineDdpMlp, AnEpochsShortLastBatchRunsOneRowPerMicrobatchAndStaysExact) {
  // 1200 examples in batches of 32: the epoch's 38th batch has 16 rows, fewer than 32 microbatches.
  auto run = [](const std::string& name, std::vector<std::string> flags) {
    const std::string dir = FreshDir(name);
    flags.insert(flags.end(), {"--hidden=24,16,12", "--epochs=1", "--microbatches=32", "--checkpoint_dir=" + dir});
    const RunResult r = RunDdpMlp(TinyJob("gloo", flags));
    EXPECT_EQ(r.exit_code, 0) << Explain(r);
    return dir + "/" + CheckpointName(38);
  };
  EXPECT_TRUE(SameModelAndOptimizer(run("short_one", {"--nproc=1"}), run("short_pp", {"--nproc=2", "--pp=2"})));
}

// "train loss A | test loss B" of the run's last epoch line.
std::pair<double, double> EpochLosses(const std::string& out) {
  const size_t at = out.rfind("train loss ");
  double train = -1, test = -1;
  if (at != std::string::npos) std::sscanf(out.c_str() + at, "train loss %lf | test loss %lf", &train, &test);
  return {train, test};
}

// The largest difference between two checkpoints' models (same names and shapes).
double MaxDifference(const std::string& a, const std::string& b) {
  auto x = nn::LoadSafetensors(a + "/model.safetensors");
  auto y = nn::LoadSafetensors(b + "/model.safetensors");
  EXPECT_TRUE(x.ok() && y.ok()) << a << " / " << b;
  if (!x.ok() || !y.ok()) return INFINITY;
  double most = 0;
  for (const auto& [name, tensor] : x->tensors) {
    auto other = y->tensors.find(name);
    if (other == y->tensors.end() || other->second.shape() != tensor.shape()) return INFINITY;
    const std::vector<float> u = tensor.ToVector<float>(), v = other->second.ToVector<float>();
    for (size_t i = 0; i < u.size(); ++i) most = std::max(most, std::fabs(static_cast<double>(u[i]) - v[i]));
  }
  return most;
}

TEST(PipelineDdpMlp, TheThreeDimensionalMeshTrainsLikeOneProcessWithinReassociation) {
  // dp 1 x pp 2 x tp 2 (4 ranks): each stage's layers split over a tensor-parallel pair. Tensor parallelism adds
  // its partial sums in another order than one GEMM (docs/tensor_parallel.md), so: equal within 2e-4 after an
  // epoch, not bit for bit; a missing all_reduce or a stage fed the wrong activation is off by far more.
  const std::vector<std::string> job = {"--hidden=24,16,12", "--epochs=1", "--microbatches=4", "--optimizer=adamw",
                                        "--lr=0.01"};
  auto run = [&](std::vector<std::string> more) {
    more.insert(more.begin(), job.begin(), job.end());
    const RunResult r = RunDdpMlp(TinyJob("gloo", more));
    EXPECT_EQ(r.exit_code, 0) << Explain(r);
    return r;
  };
  const RunResult one = run({"--nproc=1"});
  const RunResult mesh = run({"--nproc=4", "--pp=2", "--tp=2"});
  EXPECT_NE(mesh.out.find("4 ranks as 1 data-parallel replicas x 2 pipeline stages x 2 tensor-parallel"),
            std::string::npos) << mesh.out;
  EXPECT_NE(mesh.out.find("rank 3 replica 0 stage 1 tp 1"), std::string::npos) << mesh.out;
  const auto [train_one, test_one] = EpochLosses(one.out);
  const auto [train_mesh, test_mesh] = EpochLosses(mesh.out);
  ASSERT_GT(train_one, 0);
  EXPECT_NEAR(train_mesh, train_one, 2e-4);
  EXPECT_NEAR(test_mesh, test_one, 2e-4);
  // Its checkpoint is one process's model (each stage's shards gathered, then the stages), within the same bound,
  // and one process resumes from it where the 3-D run would have gone.
  const std::string one_dir = Train("mesh3d_one", {"--nproc=1", "--microbatches=4", "--optimizer=adamw", "--lr=0.01"});
  const std::string mesh_dir = FreshDir("mesh3d");
  std::vector<std::string> first = {"--nproc=4", "--pp=2", "--tp=2", "--max_steps=6"};
  first.insert(first.end(), job.begin(), job.end());
  first.push_back("--checkpoint_dir=" + mesh_dir);
  const RunResult a = RunDdpMlp(TinyJob("gloo", first));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  std::vector<std::string> second = {"--nproc=1", "--max_steps=10", "--resume"};
  second.insert(second.end(), job.begin(), job.end());
  second.push_back("--checkpoint_dir=" + mesh_dir);
  const RunResult b = RunDdpMlp(TinyJob("gloo", second));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_LT(MaxDifference(one_dir, mesh_dir + "/" + CheckpointName(kSteps)), 2e-4);
  const RunResult zero = RunDdpMlp(TinyJob("gloo", {"--nproc=4", "--pp=2", "--tp=2", "--zero=1"}));
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("drop --zero"), std::string::npos) << Explain(zero);
}

TEST(PipelineDdpMlp, BadLayoutsAreRefusedNamingTheFlagAndTheFix) {
  const RunResult three = RunDdpMlp(TinyJob("gloo", {"--nproc=3", "--pp=2", "--epochs=1"}));
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.err.find("--pp=2 does not divide the job's 3 ranks"), std::string::npos) << Explain(three);
  const RunResult deep = RunDdpMlp(TinyJob("gloo", {"--pp=3"}));  // 32-24-10: two Linears
  EXPECT_EQ(deep.exit_code, 2);
  EXPECT_NE(deep.err.find("use --pp <= 2"), std::string::npos) << Explain(deep);
  const RunResult zero = RunDdpMlp(TinyJob("gloo", {"--pp=2", "--zero=2"}));
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("use --zero=1 or --zero=0"), std::string::npos) << Explain(zero);
  const RunResult uneven = RunDdpMlp(TinyJob("gloo", {"--pp=2", "--microbatches=5"}));
  EXPECT_EQ(uneven.exit_code, 2);
  EXPECT_NE(uneven.err.find("--microbatches=5: must divide --batch_size=32"), std::string::npos) << Explain(uneven);
}

}  // namespace
}  // namespace tinyddp::testing
