// FusedOptimizer (fused_optimizer.h) on real processes with Gloo: one optimizer per bucket, stepped at the
// end of backward or during it, leaves the parameters and the optimizer state bit for bit where a plain
// Step() after backward leaves them. The same DDP setup runs twice in each process, once each way, on the
// same batches: SGD with momentum and AdamW, float32 and bf16 (the compute copies written by the same pass),
// 1 and 3 ranks, through the bucket rebuild after the first step, with gradient accumulation (NoSync).
#include "dist/accel/fused_optimizer/fused_optimizer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;

enum class Kind { kSgd, kAdamW };

std::unique_ptr<nn::Optimizer> Make(Kind kind, std::vector<Variable> params, const nn::Module& model) {
  std::unique_ptr<nn::Optimizer> opt;
  if (kind == Kind::kSgd) {
    nn::SgdOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    opt = std::make_unique<nn::SGD>(std::move(params), so);
  } else {
    nn::AdamWOptions ao;
    ao.lr = 0.01;
    opt = std::make_unique<nn::AdamW>(std::move(params), ao);
  }
  opt->SetComputeCopies(model.ComputeCopies());  // bf16: this optimizer's parameters' copies; fp32: none
  return opt;
}

struct Case {
  Kind kind;
  bool bf16;
  bool in_backward;
  int accumulate;  // micro-batches per step (NoSync for all but the last)
};

std::string Name(const Case& c) {
  return absl::StrCat(c.kind == Kind::kSgd ? "SGD" : "AdamW", c.bf16 ? " bf16" : " fp32",
                      c.in_backward ? ", in backward" : ", after backward", ", ", c.accumulate, " micro-batch(es)");
}

// One DDP over a fresh MLP; `fused` null: the plain loop (Step after backward).
struct Trainer {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<nn::Optimizer> plain;
  std::unique_ptr<FusedOptimizer> fused;
};

Trainer MakeTrainer(const Case& c, std::shared_ptr<ProcessGroup> pg, bool fused) {
  Trainer t;
  nn::MlpOptions mo;
  mo.seed = 21;
  t.model = nn::MLP({13, 17, 11, 5}, mo);
  if (c.bf16) t.model->SetPrecision(nn::Precision::kBFloat16);
  DdpOptions options;
  options.first_bucket_bytes = 256;  // several buckets, and a rebuild that changes them
  options.bucket_cap_bytes = 700;
  t.ddp = DistributedDataParallel::Create(*t.model, pg, options).value();
  if (fused) {
    nn::Module& model = *t.model;
    t.fused = FusedOptimizer::Attach(
                  *t.ddp, [&c, &model](std::vector<Variable> params) { return Make(c.kind, std::move(params), model); },
                  {.in_backward = c.in_backward})
                  .value();
  } else {
    t.plain = Make(c.kind, t.model->Parameters(), *t.model);
  }
  return t;
}

void TrainStep(Trainer& t, const Case& c, int rank, int step) {
  t.model->ZeroGrad();
  for (int micro = 0; micro < c.accumulate; ++micro) {
    const Batch b = ddp_testing::MakeBatch(4, 13, 5, 1000 * step + 10 * rank + micro);
    auto loss = [&] { return autograd::CrossEntropy(t.ddp->Forward(Variable(b.x)), b.labels); };
    if (micro + 1 < c.accumulate) {
      auto no_sync = t.ddp->NoSync();
      autograd::Backward(loss());
    } else {
      autograd::Backward(loss());  // fused: the buckets step in here
    }
  }
  ASSERT_TRUE(t.ddp->status().ok()) << t.ddp->status();
  if (t.plain) t.plain->Step();
}

// Any tensor's values as float32 (a bf16 copy, a float32 step count widen exactly).
std::vector<float> Floats(const Tensor& t) { return ops::Cast(t, DType::kFloat32).ToVector<float>(); }

void ExpectSameBits(const Trainer& fused, const Trainer& plain, const std::string& when) {
  const auto a = fused.model->NamedParameters(), b = plain.model->NamedParameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.data().ToVector<float>(), b[i].second.data().ToVector<float>()) << a[i].first << " " << when;
  }
  const auto copies_a = fused.model->ComputeCopies(), copies_b = plain.model->ComputeCopies();
  ASSERT_EQ(copies_a.size(), copies_b.size());
  for (size_t i = 0; i < copies_a.size(); ++i) {
    EXPECT_EQ(Floats(copies_a[i].second), Floats(copies_b[i].second))
        << "bf16 copy " << i << " " << when;
  }
  // The state, named as one optimizer over the model's parameters names it.
  const nn::TensorMap state = fused.fused->StateTensorsOver(fused.model->Parameters());
  const nn::TensorMap expected = plain.plain->StateTensors();
  ASSERT_EQ(state.size(), expected.size()) << when;
  for (const auto& [name, tensor] : expected) {
    ASSERT_EQ(state.count(name), 1u) << name << " " << when;
    EXPECT_EQ(Floats(state.at(name)), Floats(tensor))
        << name << " " << when;
  }
}

void RunCases(int ranks, const std::vector<Case>& cases) {
  RunOnRanks(ranks, [&cases](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(c));
      Trainer fused = MakeTrainer(c, pg, /*fused=*/true);
      Trainer plain = MakeTrainer(c, pg, /*fused=*/false);
      for (int step = 0; step < 4; ++step) {
        if (step == 3) {  // a schedule's new rate reaches every bucket's optimizer
          fused.fused->SetLr(0.004);
          plain.plain->set_lr(0.004);
        }
        TrainStep(fused, c, ctx.rank, step);
        TrainStep(plain, c, ctx.rank, step);
        ExpectSameBits(fused, plain, absl::StrCat("after step ", step + 1));
      }
      EXPECT_TRUE(fused.ddp->reducer().buckets_rebuilt());
      EXPECT_GE(fused.fused->optimizers().size(), 2u);
    }
  });
}

TEST(FusedOptimizer, InBackwardAndAfterBackwardStepToTheBitsOfAPlainStepOnThreeRanks) {
  std::vector<Case> cases;
  for (Kind kind : {Kind::kSgd, Kind::kAdamW}) {
    for (bool bf16 : {false, true}) {
      for (bool in_backward : {true, false}) cases.push_back({kind, bf16, in_backward, 1});
    }
  }
  RunCases(3, cases);
}

TEST(FusedOptimizer, UpdatesOnlyOnTheLastMicroBatchAndWorksOnOneRank) {
  RunCases(3, {{Kind::kAdamW, false, true, 3}, {Kind::kSgd, true, true, 2}});
  RunCases(1, {{Kind::kAdamW, false, true, 1}, {Kind::kSgd, false, false, 2}});
}

TEST(FusedOptimizer, LoadsAPlainOptimizersStateAndRefusesWhatItCannotServe) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    const Case c{Kind::kAdamW, false, true, 1};
    // A plain run's state after 2 steps, loaded into a fused run: both then take the same third step.
    Trainer plain = MakeTrainer(c, pg, /*fused=*/false);
    Trainer fused = MakeTrainer(c, pg, /*fused=*/true);
    for (int step = 0; step < 2; ++step) TrainStep(plain, c, ctx.rank, step);
    const auto from = plain.model->Parameters(), to = fused.model->Parameters();
    for (size_t i = 0; i < from.size(); ++i) {
      Tensor data = to[i].data();
      ops::CopyInto(data, from[i].data());
    }
    ASSERT_TRUE(fused.fused->LoadStateTensorsOver(to, plain.plain->StateTensors()).ok());
    TrainStep(plain, c, ctx.rank, 2);
    TrainStep(fused, c, ctx.rank, 2);
    ExpectSameBits(fused, plain, "after a step from the loaded state");

    nn::TensorMap bad = plain.plain->StateTensors();
    bad["state.99.exp_avg"] = bad.begin()->second;
    const absl::Status refused = fused.fused->LoadStateTensorsOver(to, bad);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(refused.message(), "state.99.exp_avg")) << refused;

    DdpOptions unused;
    unused.find_unused_parameters = true;
    auto model = nn::MLP({13, 17, 5});
    auto ddp = DistributedDataParallel::Create(*model, pg, unused).value();
    auto attached = FusedOptimizer::Attach(*ddp, [&](std::vector<Variable> p) { return Make(c.kind, p, *model); });
    EXPECT_EQ(attached.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(attached.status().message(), "find_unused_parameters")) << attached.status();
  });
}

}  // namespace
}  // namespace tinyddp::dist
