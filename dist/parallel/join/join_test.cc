// Join on real processes with Gloo: ranks with different numbers of batches (and of rows per batch) train an
// MLP of three buckets to the end of the epoch without a hang, end with bit-identical weights and optimizer
// state on every rank, and agree with the reference of join.h after every step:
//
//   one process, one model and optimizer; at step t, the gradient is the mean over the ranks that have a
//   batch at step t of each such rank's mean-loss gradient on its batch (divided by the world size instead,
//   with divide_by_initial_world_size), then one optimizer step.
//
// Tolerance: atol 1e-5 + rtol 1e-4, the float reassociation between the reference's sums and DDP's (each
// rank's gradient scaled by W / n, then averaged over W by Gloo's ring) after a few steps; AdamW divides by
// sqrt(v), which magnifies those last-bit differences for small gradients, hence more than the 2e-6 that
// plain DDP's equivalence test needs. Across ranks the comparison is exact.
#include "dist/parallel/join/join.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/ddp/bf16_compress_hook.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/ddp.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::dist::join {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;

const std::vector<int64_t> kDims = {13, 17, 11, 5};  // 3 layers, odd sizes
constexpr double kAtol = 1e-5, kRtol = 1e-4;

enum class Opt { kSgdMomentum, kAdamW };

std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt kind, std::vector<Variable> params) {
  if (kind == Opt::kSgdMomentum) {
    nn::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    return std::make_unique<nn::SGD>(std::move(params), o);
  }
  nn::AdamWOptions o;
  o.lr = 1e-2;
  return std::make_unique<nn::AdamW>(std::move(params), o);
}

const char* Name(Opt kind) { return kind == Opt::kSgdMomentum ? "SGD(momentum=0.9)" : "AdamW"; }

// Which steps of an epoch a rank has a batch for: "xx." = steps 0 and 1, not 2. Ranks differ in length.
using Schedule = std::vector<std::string>;  // one entry per rank

bool HasBatch(const Schedule& s, int rank, int step) {
  return step < static_cast<int>(s[rank].size()) && s[rank][step] == 'x';
}
int Longest(const Schedule& s) {
  size_t most = 0;
  for (const std::string& r : s) most = std::max(most, r.size());
  return static_cast<int>(most);
}

// Rank r's batch at (epoch, step): 3 + r rows, so the ranks' mean losses are over different counts and
// the reference (a mean of per-rank means) differs from the mean over all rows.
Batch BatchOf(int epoch, int rank, int step) {
  return ddp_testing::MakeBatch(3 + rank, kDims.front(), kDims.back(), 7000 + 1000 * epoch + 100 * rank + step);
}

// One step of the reference: the mean (or, divide_by_world, the sum / W) of the per-rank gradients of the
// ranks with a batch at `step`, then the optimizer.
void ReferenceStep(nn::Module& ref, nn::Optimizer& opt, const Schedule& s, int epoch, int step, bool divide_by_world) {
  const auto params = ref.NamedParameters();
  std::vector<Tensor> sum;
  for (const auto& [name, p] : params) sum.push_back(Tensor::Zeros(p.shape()));
  int n = 0;
  for (int r = 0; r < static_cast<int>(s.size()); ++r) {
    if (!HasBatch(s, r, step)) continue;
    ++n;
    const Batch b = BatchOf(epoch, r, step);
    ref.ZeroGrad();
    autograd::Backward(autograd::CrossEntropy(ref.Forward(Variable(b.x)), b.labels));
    for (size_t i = 0; i < params.size(); ++i) ops::AddInto(sum[i], params[i].second.grad());
  }
  const double divisor = divide_by_world ? static_cast<double>(s.size()) : n;
  for (size_t i = 0; i < params.size(); ++i) {
    ops::ScaleInPlace(sum[i], 1.0 / divisor);
    params[i].second.set_grad(sum[i]);
  }
  opt.Step();
}

// Every optimizer state tensor (momentum buffers, Adam's moments and step counts) has the same bits on
// every rank of `pg`. Collective.
void ExpectOptimizerStateBitIdentical(ProcessGroup& pg, const nn::Optimizer& opt, const std::string& when) {
  for (const auto& [name, state] : opt.StateTensors()) {
    const Tensor local = state.To(Device::CPU()).Flatten().Clone();
    Tensor all = Tensor::Empty({local.numel() * pg.size()}, local.dtype());
    ASSERT_TRUE(pg.AllGather(all, local)->Wait().ok());
    for (int r = 0; r < pg.size(); ++r) {
      const Tensor theirs = all.Rows(r * local.numel(), (r + 1) * local.numel());
      EXPECT_EQ(std::memcmp(theirs.data_ptr(), local.data_ptr(), local.nbytes()), 0)
          << "optimizer state '" << name << "' differs between rank " << pg.rank() << " and rank " << r << " " << when;
    }
  }
}

struct Run {
  std::vector<Schedule> epochs;
  std::vector<Opt> optimizers;
  JoinOptions join;
  bool bucket_view = true;
  CommHook inner_hook;            // what Join's hook wraps (empty: AllReduceHook)
  bool find_unused = false;       // DdpOptions::find_unused_parameters
  bool fused = false;             // the optimizer runs inside DDP's backward, one per bucket
  double atol = kAtol, rtol = kRtol;
};

// The training loop of join.h's header, on this rank, checked against the reference after every step.
void TrainAndCompare(const RankContext& ctx, const Run& run) {
  std::shared_ptr<ProcessGroup> pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  for (Opt kind : run.optimizers) {
    nn::MlpOptions mo;
    mo.seed = 42;
    auto model = nn::MLP(kDims, mo);
    auto reference = nn::MLP(kDims, mo);
    if (ctx.rank != 0) ddp_testing::PerturbParameters(*model, ctx.rank);  // DDP's broadcast undoes it

    absl::StatusOr<std::unique_ptr<Join>> join = Join::Create(pg, run.join);
    ASSERT_TRUE(join.ok()) << join.status();
    DdpOptions options;
    options.first_bucket_bytes = 256;  // three buckets
    options.bucket_cap_bytes = 700;
    options.gradient_as_bucket_view = run.bucket_view;
    options.find_unused_parameters = run.find_unused;
    options.comm_hook = (*join)->Hook(run.inner_hook);
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_GE((*ddp)->reducer().num_buckets(), 3);
    auto opt = MakeOptimizer(kind, model->Parameters());
    auto ref_opt = MakeOptimizer(kind, reference->Parameters());
    std::unique_ptr<FusedOptimizer> fused;
    if (run.fused) {
      fused = FusedOptimizer::Attach(**ddp, [kind](std::vector<Variable> params) {
                return MakeOptimizer(kind, std::move(params));
              }).value();
    }
    // The optimizer the loop steps: none when the fused optimizers step inside backward.
    nn::Optimizer* loop_opt = run.fused ? nullptr : opt.get();
    const Variable placeholder(Tensor::Zeros({1, kDims.front()}));

    for (int epoch = 0; epoch < static_cast<int>(run.epochs.size()); ++epoch) {
      const Schedule& s = run.epochs[epoch];
      int step = 0;
      for (;;) {
        const bool has_batch = HasBatch(s, ctx.rank, step);
        absl::StatusOr<Turn> turn = (*join)->Next(has_batch);
        ASSERT_TRUE(turn.ok()) << turn.status();
        if (*turn == Turn::kAllDone) break;
        const std::string when =
            absl::StrCat("after ", Name(kind), " epoch ", epoch, " step ", step, " on rank ", ctx.rank);
        ASSERT_LT(step, Longest(s)) << when;
        EXPECT_EQ((*join)->step(), step);
        std::vector<int> training;
        for (int r = 0; r < ctx.world_size; ++r) {
          if (HasBatch(s, r, step)) training.push_back(r);
        }
        EXPECT_EQ((*join)->training_ranks(), training) << when;
        if (*turn == Turn::kShadow) {
          ASSERT_FALSE(has_batch) << when;
          const absl::Status shadow = (*join)->Shadow(**ddp, loop_opt, placeholder);
          ASSERT_TRUE(shadow.ok()) << shadow;
        } else {
          ASSERT_TRUE(has_batch) << when;
          const Batch b = BatchOf(epoch, ctx.rank, step);
          model->ZeroGrad(/*set_to_none=*/kind == Opt::kSgdMomentum);  // both ways of clearing
          autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(b.x)), b.labels));
          ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
          if (loop_opt != nullptr) loop_opt->Step();
        }
        ReferenceStep(*reference, *ref_opt, s, epoch, step, run.join.divide_by_initial_world_size);
        ddp_testing::ExpectParametersNear(*model, *reference, run.atol, run.rtol, when);
        ++step;
      }
      const std::string end = absl::StrCat("at the end of epoch ", epoch, " (", Name(kind), ")");
      EXPECT_EQ(step, Longest(s)) << end;
      EXPECT_EQ((*join)->step(), Longest(s)) << end;
      const int64_t mine = std::count(s[ctx.rank].begin(), s[ctx.rank].end(), 'x');
      EXPECT_EQ((*join)->steps_trained(), mine) << end;
      EXPECT_EQ((*join)->steps_shadowed(), Longest(s) - mine) << end;
      ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *model, end);
      if (loop_opt != nullptr) ExpectOptimizerStateBitIdentical(*pg, *loop_opt, end);
      if (fused) {
        for (const auto& opt : fused->optimizers()) ExpectOptimizerStateBitIdentical(*pg, *opt, end);
      }
    }
  }
}

TEST(Join, ThreeRanksWithTwoFiveAndThreeBatchesFinishWithIdenticalWeightsEqualToTheReference) {
  RunOnRanks(3, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"xx", "xxxxx", "xxx"}}, .optimizers = {Opt::kSgdMomentum, Opt::kAdamW}});
  });
}

TEST(Join, TwoRanksOverTwoEpochsInTheCoalescedLayoutWithARankBackAfterAGap) {
  // Epoch 1: rank 0 has no batch at step 1 but has one at step 2 again.
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"xxxx", "x"}, {"x.x", "xxxx"}},
                          .optimizers = {Opt::kAdamW},
                          .bucket_view = false});
  });
}

TEST(Join, ARankWithNoBatchAtAllShadowsEveryStep) {
  // Rank 0's first step is a shadow, so the gradient order DDP rebuilds its buckets from is recorded in a
  // shadow backward there; the rebuild's broadcast in the next Forward must still match.
  RunOnRanks(3, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"", "xxx", "xx"}}, .optimizers = {Opt::kSgdMomentum}});
  });
}

TEST(Join, DividingByTheInitialWorldSizeMatchesTheSumOverTrainingRanksOverW) {
  RunOnRanks(3, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"xx", "xxxxx", "xxx"}},
                          .optimizers = {Opt::kSgdMomentum},
                          .join = {.divide_by_initial_world_size = true}});
  });
}

TEST(Join, WithFindUnusedParametersTheShadowAlsoExchangesTheUsedMap) {
  // find_unused_parameters adds an all_reduce of the used-parameter map after the buckets, on every rank.
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"xx", "xxxx"}}, .optimizers = {Opt::kAdamW}, .find_unused = true});
  });
}

TEST(Join, FusedOptimizersStepInsideTheShadowsBackwardToo) {
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"x", "xxx"}}, .optimizers = {Opt::kSgdMomentum}, .fused = true});
  });
}

TEST(Join, WrapsAnotherHookThatAveragesOverTheWorldHereBf16Compression) {
  // The gradients travel as bfloat16 (8 bits of mantissa), so the reference is met to about 1e-2 only;
  // across ranks the bits are still identical.
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainAndCompare(ctx, {.epochs = {{"xxx", "x"}},
                          .optimizers = {Opt::kSgdMomentum},
                          .inner_hook = Bf16CompressHook(),
                          .atol = 1e-2,
                          .rtol = 1e-2});
  });
}

TEST(Join, ADdpWithoutJoinsHookIsReportedOnEveryRankAtTheNextStep) {
  RunOnRanks(3, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 1;
    auto model = nn::MLP(kDims, mo);
    auto join = Join::Create(pg);
    ASSERT_TRUE(join.ok());
    auto ddp = DistributedDataParallel::Create(*model, pg);  // the mistake: no comm_hook = join->Hook()
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto opt = MakeOptimizer(Opt::kSgdMomentum, model->Parameters());
    // Step 0: ranks 0 and 1 train, rank 2 shadows; all go through DDP's plain hook.
    const bool has_batch = ctx.rank < 2;
    absl::StatusOr<Turn> turn = (*join)->Next(has_batch);
    ASSERT_TRUE(turn.ok()) << turn.status();
    if (*turn == Turn::kShadow) {
      ASSERT_TRUE((*join)->Shadow(**ddp, opt.get(), Variable(Tensor::Zeros({1, kDims.front()}))).ok());
    } else {
      const Batch b = BatchOf(0, ctx.rank, 0);
      opt->ZeroGrad();
      autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(b.x)), b.labels));
      opt->Step();
    }
    turn = (*join)->Next(has_batch);
    ASSERT_FALSE(turn.ok());
    const std::string message(turn.status().message());
    EXPECT_TRUE(absl::IsFailedPrecondition(turn.status())) << message;
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(absl::StrContains(message, absl::StrCat("rank ", r, "'s DDP step 0"))) << message;
    }
    EXPECT_TRUE(absl::StrContains(message, "DdpOptions::comm_hook = join->Hook()")) << message;
  });
}

TEST(Join, GradientAccumulationAndMisplacedShadowsAreRefusedBeforeAnyCollective) {
  RunOnRanks(2, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 2;
    auto model = nn::MLP(kDims, mo);
    auto join = Join::Create(pg);
    ASSERT_TRUE(join.ok());
    DdpOptions options;
    options.comm_hook = (*join)->Hook();
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto opt = MakeOptimizer(Opt::kSgdMomentum, model->Parameters());
    const Variable placeholder(Tensor::Zeros({1, kDims.front()}));
    auto train = [&](int step) {
      const Batch b = BatchOf(0, ctx.rank, step);
      opt->ZeroGrad();
      autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(b.x)), b.labels));
      opt->Step();
    };

    // Step 0: both train. Shadow on a training turn is refused, and issues nothing.
    absl::StatusOr<Turn> turn = (*join)->Next(true);
    ASSERT_TRUE(turn.ok()) << turn.status();
    ASSERT_EQ(*turn, Turn::kTrain);
    const absl::Status misplaced = (*join)->Shadow(**ddp, opt.get(), placeholder);
    EXPECT_TRUE(absl::IsFailedPrecondition(misplaced)) << misplaced;
    EXPECT_TRUE(absl::StrContains(misplaced.message(), "turn is \"train\"")) << misplaced;
    train(0);
    ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();

    // Step 1: rank 0 trains under NoSync (gradient accumulation); rank 1 has no batch and shadows inside
    // NoSync. Both are refused on their own rank, before any collective (none of them is left waiting).
    turn = (*join)->Next(ctx.rank == 0);
    ASSERT_TRUE(turn.ok()) << turn.status();
    {
      auto no_sync = (*ddp)->NoSync();
      if (ctx.rank == 0) {
        ASSERT_EQ(*turn, Turn::kTrain);
        train(1);
        turn = (*join)->Next(true);
        ASSERT_FALSE(turn.ok());
        EXPECT_TRUE(absl::IsFailedPrecondition(turn.status())) << turn.status();
        EXPECT_TRUE(absl::StrContains(turn.status().message(), "gradient accumulation")) << turn.status();
      } else {
        ASSERT_EQ(*turn, Turn::kShadow);
        const absl::Status shadow = (*join)->Shadow(**ddp, opt.get(), placeholder);
        EXPECT_TRUE(absl::IsFailedPrecondition(shadow)) << shadow;
        EXPECT_TRUE(absl::StrContains(shadow.message(), "NoSync")) << shadow;
        // And moving on without the shadow step is refused too.
        turn = (*join)->Next(false);
        ASSERT_FALSE(turn.ok());
        EXPECT_TRUE(absl::StrContains(turn.status().message(), "did not call Join::Shadow")) << turn.status();
      }
    }
  });
}

TEST(Join, CreateRefusesANullGroup) {
  absl::StatusOr<std::unique_ptr<Join>> join = Join::Create(nullptr);
  ASSERT_FALSE(join.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(join.status())) << join.status();
  EXPECT_TRUE(absl::StrContains(join.status().message(), "the group DDP uses")) << join.status();
}

}  // namespace
}  // namespace tinyddp::dist::join
