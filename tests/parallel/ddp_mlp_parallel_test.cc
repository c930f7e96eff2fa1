// //examples:ddp_mlp --tp and --join end to end, as a user runs them (Gloo ranks, the tiny synthetic job of
// tests/ddp_mlp: a 32-24-10 MLP, whose two Linears become one column -> row pair under --tp=2).
//
// --tp: tensor parallelism alone (2 ranks, --tp=2) trains to one process's weights, and a 2 x 2 mesh (4 ranks,
// --tp=2) to 2-rank DDP's, SGD and AdamW; ZeRO-1 down the mesh's columns too. The weights agree within float
// reassociation, not bit for bit: a row-parallel layer adds its 24 input features as two partial sums of 12,
// which the all_reduce then adds. Its checkpoint is one process's model (same names and shapes) and resumes at
// another mesh shape. A --tp that does not divide the ranks is refused with what to do.
// --join: ranks with different numbers of batches (no padding) finish every epoch, say how many steps each
// trained and shadowed, and the run resumes from its checkpoint like any other; a rank with no batch at all
// shadows every step.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nn/safetensors.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"

namespace tinyddp::testing {
namespace {

// Float reassociation over a few dozen steps of a tiny model: differences of a few ulps that grow with the
// steps. Measured: at most ~1e-6 here; a wrong split (a bias added twice, a missing all_reduce) moves the
// weights by more than 1e-2 within a step.
constexpr double kTolerance = 2e-4;

// The largest difference between two checkpoints' models, which must have the same names and shapes.
double MaxDifference(const std::string& a, const std::string& b) {
  auto x = nn::LoadSafetensors(a + "/model.safetensors");
  auto y = nn::LoadSafetensors(b + "/model.safetensors");
  EXPECT_TRUE(x.ok() && y.ok()) << a << " / " << b;
  if (!x.ok() || !y.ok()) return INFINITY;
  EXPECT_EQ(x->tensors.size(), y->tensors.size());
  double most = 0;
  for (const auto& [name, tensor] : x->tensors) {
    auto other = y->tensors.find(name);
    if (other == y->tensors.end() || other->second.shape() != tensor.shape()) {
      ADD_FAILURE() << name << " is missing or of another shape in " << b;
      return INFINITY;
    }
    const std::vector<float> u = tensor.ToVector<float>(), v = other->second.ToVector<float>();
    for (size_t i = 0; i < u.size(); ++i) most = std::max(most, std::fabs(static_cast<double>(u[i]) - v[i]));
  }
  return most;
}

std::string Train(const std::string& name, std::vector<std::string> flags) {
  const std::string dir = FreshDir(name);
  flags.push_back("--checkpoint_dir=" + dir);
  const RunResult r = RunDdpMlp(TinyJob("gloo", flags));
  EXPECT_EQ(r.exit_code, 0) << Explain(r);
  return dir + "/step-" + std::string(8 - std::to_string(2 * kTinyStepsPerEpoch).size(), '0') +
         std::to_string(2 * kTinyStepsPerEpoch);
}

TEST(TensorParallelDdpMlp, TpAloneEqualsOneProcessAndTheMeshEqualsDdp) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    const std::vector<std::string> common = {"--epochs=2", "--optimizer=" + optimizer, "--seed=3",
                                             optimizer == "adamw" ? "--lr=0.01" : "--lr=0.2"};
    auto with = [&](std::vector<std::string> more) {
      more.insert(more.begin(), common.begin(), common.end());
      return more;
    };
    const std::string one = Train("one_" + optimizer, with({"--nproc=1"}));
    const std::string tp = Train("tp_" + optimizer, with({"--nproc=2", "--tp=2"}));
    EXPECT_LT(MaxDifference(one, tp), kTolerance) << "--tp=2 against one process";
    const std::string ddp = Train("ddp_" + optimizer, with({"--nproc=2"}));
    EXPECT_GT(MaxDifference(one, ddp), 1e-3) << "two replicas should train differently from one (bigger batch)";
    const std::string mesh = Train("mesh_" + optimizer, with({"--nproc=4", "--tp=2"}));
    EXPECT_LT(MaxDifference(ddp, mesh), kTolerance) << "a 2 x 2 mesh against 2-rank DDP";
    if (optimizer == "adamw") {
      const std::string zero = Train("mesh_zero1", with({"--nproc=4", "--tp=2", "--zero=1"}));
      EXPECT_LT(MaxDifference(ddp, zero), kTolerance) << "a 2 x 2 mesh with ZeRO-1 against 2-rank DDP";
    }
  }
}

TEST(TensorParallelDdpMlp, PrintsTheSplitAndACheckpointResumesAtAnotherMeshShape) {
  const std::vector<std::string> common = {"--epochs=2", "--optimizer=adamw", "--lr=0.01", "--seed=4"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return TinyJob("gloo", more);
  };
  const std::string whole = FreshDir("tp_whole");
  const RunResult a = RunDdpMlp(with({"--nproc=2", "--checkpoint_dir=" + whole}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);

  const std::string dir = FreshDir("tp_resumed");
  const RunResult b = RunDdpMlp(with({"--nproc=4", "--tp=2", "--max_steps=23", "--checkpoint_dir=" + dir}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_NE(b.out.find("4 ranks as 2 data-parallel replicas x 2 tensor-parallel"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("column"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("added after the sum"), std::string::npos) << b.out;
  // The 4-rank tensor-parallel checkpoint, resumed by 2 plain DDP ranks (the same 2 replicas), ends where the
  // uninterrupted 2-rank run ends.
  const RunResult c = RunDdpMlp(with({"--nproc=2", "--checkpoint_dir=" + dir, "--resume"}));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_NE(c.out.find("resumed from " + dir + "/step-00000023"), std::string::npos) << c.out;
  EXPECT_LT(MaxDifference(whole + "/step-00000038", dir + "/step-00000038"), kTolerance);
}

TEST(TensorParallelDdpMlp, ATpThatDoesNotDivideTheRanksIsRefused) {
  const RunResult r = RunDdpMlp(TinyJob("gloo", {"--nproc=3", "--tp=2", "--epochs=1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tp=2 does not divide the job's 3 ranks"), std::string::npos) << Explain(r);
  const RunResult z = RunDdpMlp(TinyJob("gloo", {"--nproc=2", "--tp=2", "--zero=3"}));
  EXPECT_EQ(z.exit_code, 2);
  EXPECT_NE(z.err.find("--zero=1 or --zero=2"), std::string::npos) << Explain(z);
}

TEST(JoinDdpMlp, UnevenShardsFinishEveryEpochAndResume) {
  // 3 ranks, 193 examples, no padding: 65, 64 and 64 examples, so 3, 2 and 2 batches of 32.
  const std::vector<std::string> common = {"--nproc=3", "--join", "--synthetic_examples=193", "--epochs=2",
                                           "--log_every=1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return TinyJob("gloo", more);
  };
  const std::string whole = FreshDir("join_whole");
  const RunResult a = RunDdpMlp(with({"--checkpoint_dir=" + whole}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  EXPECT_NE(a.out.find("rank 0 3/0, rank 1 2/1, rank 2 2/1"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("epoch 2/2"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("2 epochs x 3 steps"), std::string::npos) << "the longest shard sets the epoch\n" << a.out;

  // Stopped after the first epoch's last step, resumed: the same weights as the uninterrupted run.
  const std::string dir = FreshDir("join_resumed");
  const RunResult b = RunDdpMlp(with({"--checkpoint_dir=" + dir, "--max_steps=4"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  const RunResult c = RunDdpMlp(with({"--checkpoint_dir=" + dir, "--resume"}));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_EQ(MaxDifference(whole + "/step-00000006", dir + "/step-00000006"), 0) << "bit for bit";

  // --join and the features it cannot serve are refused up front, not half-run.
  const RunResult z = RunDdpMlp(with({"--zero=1"}));
  EXPECT_EQ(z.exit_code, 2);
  EXPECT_NE(z.err.find("--join"), std::string::npos) << Explain(z);
}

TEST(JoinDdpMlp, ARankWithNoBatchAtAllShadowsEveryStepInsteadOfAborting) {
  // The job: 11 ranks, 10 examples (the fewest --synthetic_examples takes), no padding: ranks 0-9 hold
  // one example each, rank 10 none. Its own count of steps is 0, which no learning-rate schedule accepts; the
  // schedule must wait for the count the ranks agree on (the longest shard's: 1 step), not abort rank 10
  // before they meet. 11 tiny ranks on this machine's cores: --ignore_worker_limits.
  const RunResult r = RunDdpMlp(TinyJob("gloo", {"--nproc=11", "--ignore_worker_limits", "--join",
                                                 "--synthetic_examples=10", "--epochs=2", "--lr_schedule=cosine"}));
  ASSERT_EQ(r.exit_code, 0) << Explain(r);
  EXPECT_NE(r.out.find("2 epochs x 1 steps"), std::string::npos) << "the longest shard sets the epoch\n" << r.out;
  EXPECT_NE(r.out.find("rank 9 1/0, rank 10 0/1"), std::string::npos) << "rank 10 shadows the step\n" << r.out;
  EXPECT_NE(r.out.find("done: 2 steps"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tinyddp::testing
