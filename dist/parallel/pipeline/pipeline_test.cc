// Pipeline parallelism (pipeline_runtime.h) on real processes over Gloo, against one process:
//   * the reference: one process, the whole model as one stage, the batch cut into M microbatches whose
//     gradients accumulate before one optimizer step, is bit for bit the plain loop a PyTorch user writes
//     for gradient accumulation (model(x_k), loss_k, backward seeded with k's share, step);
//   * GPipe, 1F1B and ZB-H1 at p = 2 and 3, and interleaved 1F1B at p = 2 with v = 2, train to exactly the
//     reference's bits after several steps, SGD (momentum, weight decay) and AdamW, with uneven microbatches
//     (a batch of 11 rows in 4 or 5) and the same losses: every stage sums its microbatches' gradients in
//     microbatch order (schedule.h), and each microbatch is the same GEMMs on the same rows;
//   * 1F1B holds at most p - s microbatches on stage s and GPipe all M, counted by the runtime, and the
//     allocator sees the difference on stage 0;
//   * each rank's measured idle fraction lies in [0, 1) and the step's window covers every compute;
//   * a stage whose neighbour died gets the group's error naming that rank, at once, instead of hanging;
//   * PipelineParallelMlp (what ddp_mlp trains): gathered into one process's model and optimizer state it
//     is the reference's, bit for bit; its evaluation Forward gives every pipeline rank the reference's
//     logits; cut back from a one-process checkpoint it trains on as the one process does; and 2 pipelines
//     x 2 stages train like 2 data-parallel replicas of one stage each, and with ZeRO-1 down the columns
//     (ShardedStageOptimizer) to the same bits.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "dist/parallel/pipeline/bubble.h"
#include "dist/parallel/pipeline/pipeline_parallel_mlp.h"
#include "dist/parallel/pipeline/pipeline_runtime.h"
#include "dist/parallel/pipeline/schedule.h"
#include "dist/parallel/pipeline/sharded_stage_optimizer.h"
#include "dist/parallel/pipeline/stage_plan.h"
#include "dist/parallel/subgroups/device_mesh.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::dist::pipeline {
namespace {

using autograd::Variable;
using testing::RankContext;
using testing::RunOnRanks;

// Four Linears of odd widths: 2 or 3 balanced stages, or 2 ranks x 2 virtual stages of one Linear each.
const std::vector<int64_t> kDims = {13, 11, 9, 7, 5};
constexpr int64_t kBatch = 11;
constexpr int kSteps = 3;

enum class Opt { kSgd, kAdamW };

std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt kind, std::vector<Variable> params) {
  if (kind == Opt::kSgd) {
    return std::make_unique<nn::SGD>(std::move(params), nn::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  }
  nn::AdamWOptions options;
  options.lr = 1e-2;
  return std::make_unique<nn::AdamW>(std::move(params), options);
}

LossFn CrossEntropy() {
  return [](const Variable& logits, const Tensor& labels) { return nn::CrossEntropyLoss()(logits, labels); };
}

ddp_testing::Batch BatchOf(int step) { return ddp_testing::MakeBatch(kBatch, kDims.front(), kDims.back(), 100 + step); }

// The weights after kSteps steps, by name, and the losses: one rank's stages (or one process's whole model).
struct Trained {
  std::map<std::string, std::vector<float>> params;
  std::vector<float> losses;
};

void Record(const nn::Module& module, Trained& out) {
  for (const auto& [name, p] : module.NamedParameters()) out.params[name] = p.data().ToVector<float>();
}

// Trains `stages` (this rank's) with `runtime` for kSteps steps of M microbatches.
Trained Train(PipelineRuntime& runtime, const std::vector<std::shared_ptr<PipelineStage>>& stages, Opt kind) {
  std::vector<Variable> params;
  for (const auto& stage : stages) {
    for (const Variable& p : stage->Parameters()) params.push_back(p);
  }
  std::unique_ptr<nn::Optimizer> optimizer = MakeOptimizer(kind, params);
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    const ddp_testing::Batch batch = BatchOf(step);
    auto microbatches = SplitBatch(batch.x, batch.labels, runtime.schedule().num_microbatches());
    EXPECT_TRUE(microbatches.ok()) << microbatches.status();
    optimizer->ZeroGrad();
    absl::StatusOr<Tensor> loss = runtime.Step(*microbatches);
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (loss.ok() && loss->defined()) out.losses.push_back(loss->ToVector<float>()[0]);
    optimizer->Step();
  }
  for (const auto& stage : stages) Record(*stage, out);
  return out;
}

// The whole model as one stage, at p = 1: the reference every schedule is held to.
Trained Reference(int microbatches, Opt kind) {
  auto model = nn::MLP(kDims, {.seed = 7});
  auto plan = StagePlan::Make(*model, 1);
  std::vector<std::shared_ptr<PipelineStage>> stages = {std::make_shared<PipelineStage>(*model, plan->stages[0])};
  auto schedule = MakeSchedule({.kind = ScheduleKind::kOneFOneB, .ranks = 1, .microbatches = microbatches});
  auto runtime = PipelineRuntime::Create(*schedule, nullptr, stages, CrossEntropy());
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return Train(**runtime, stages, kind);
}

void ExpectBitIdentical(const Trained& got, const Trained& want, const std::string& what) {
  for (const auto& [name, values] : got.params) {
    ASSERT_TRUE(want.params.count(name)) << what << ": " << name;
    const std::vector<float>& expected = want.params.at(name);
    ASSERT_EQ(values.size(), expected.size()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(values.data(), expected.data(), values.size() * sizeof(float)), 0)
        << what << ": " << name << " differs from one process's (first value " << values[0] << " vs " << expected[0]
        << ")";
  }
  if (!got.losses.empty()) {
    EXPECT_EQ(std::memcmp(got.losses.data(), want.losses.data(), got.losses.size() * sizeof(float)), 0)
        << what << ": losses differ";
  }
}

TEST(Pipeline, OneStageReferenceIsThePlainGradientAccumulationLoopBitForBit) {
  for (Opt kind : {Opt::kSgd, Opt::kAdamW}) {
    const Trained reference = Reference(4, kind);
    auto model = nn::MLP(kDims, {.seed = 7});
    std::unique_ptr<nn::Optimizer> optimizer = MakeOptimizer(kind, model->Parameters());
    Trained plain;
    for (int step = 0; step < kSteps; ++step) {
      const ddp_testing::Batch batch = BatchOf(step);
      optimizer->ZeroGrad();
      Tensor step_loss;
      for (int k = 0, begin = 0; k < 4; ++k) {  // 11 rows: 3, 3, 3, 2
        const int end = begin + 2 + (k < 3 ? 1 : 0);
        const double share = static_cast<double>(end - begin) / kBatch;
        Variable loss = nn::CrossEntropyLoss()(model->Forward(Variable(batch.x.Rows(begin, end))),
                                               batch.labels.Rows(begin, end));
        autograd::Backward(loss, Tensor::Full(loss.shape(), share, loss.dtype(), loss.device()));
        if (!step_loss.defined()) step_loss = Tensor::Zeros(loss.shape(), loss.dtype(), loss.device());
        ops::AddInto(step_loss, loss.data(), share);
        begin = end;
      }
      plain.losses.push_back(step_loss.ToVector<float>()[0]);
      optimizer->Step();
    }
    Record(*model, plain);
    ExpectBitIdentical(reference, plain, kind == Opt::kSgd ? "sgd" : "adamw");
  }
}

nn::TensorMap WeightsOf(const nn::Module& model) {
  nn::TensorMap map;
  for (const auto& [name, tensor] : model.StateDict()) map[name] = tensor;
  return map;
}

void ExpectSameTensors(const nn::TensorMap& got, const nn::TensorMap& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [key, tensor] : want) {
    ASSERT_TRUE(got.count(key)) << what << ": " << key;
    const std::vector<float> a = got.at(key).ToVector<float>(), b = tensor.ToVector<float>();
    ASSERT_EQ(a.size(), b.size()) << what << ": " << key;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": " << key;
  }
}

// On every rank of a p-rank job: each schedule, each optimizer, against the reference computed in-process.
void EverySchedule(const RankContext& ctx, const std::vector<ScheduleOptions>& shapes) {
  std::shared_ptr<ProcessGroup> group = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(group, nullptr);
  for (const ScheduleOptions& shape : shapes) {
    for (Opt kind : {Opt::kSgd, Opt::kAdamW}) {
      const std::string what = absl::StrCat(ScheduleName(shape.kind), " p=", shape.ranks, " m=", shape.microbatches,
                                            " v=", shape.virtual_stages, kind == Opt::kSgd ? " sgd" : " adamw",
                                            " rank ", ctx.rank);
      auto model = nn::MLP(kDims, {.seed = 7});
      const int stages_total = shape.ranks * shape.virtual_stages;
      auto plan = StagePlan::Make(*model, stages_total, shape.kind == ScheduleKind::kInterleaved);
      ASSERT_TRUE(plan.ok()) << plan.status();
      std::vector<std::shared_ptr<PipelineStage>> mine;
      for (int s = ctx.rank; s < stages_total; s += shape.ranks) {
        mine.push_back(std::make_shared<PipelineStage>(*model, plan->stages[s]));
      }
      model.reset();  // this rank keeps only its stages
      auto schedule = MakeSchedule(shape);
      ASSERT_TRUE(schedule.ok()) << schedule.status();
      auto runtime = PipelineRuntime::Create(*schedule, group, mine, CrossEntropy());
      ASSERT_TRUE(runtime.ok()) << runtime.status();
      const Trained got = Train(**runtime, mine, kind);
      EXPECT_EQ(got.losses.empty(), !(*runtime)->holds_last_stage()) << what;
      ExpectBitIdentical(got, Reference(shape.microbatches, kind), what);
      // Activations held: 1F1B at most p - rank microbatches, GPipe all of them; the window covers them all.
      const StepRecord& step = (*runtime)->last_step();
      if (shape.kind == ScheduleKind::kOneFOneB) {
        EXPECT_LE(step.peak_in_flight, shape.ranks - ctx.rank) << what;
      }
      if (shape.kind == ScheduleKind::kGPipe) {
        EXPECT_EQ(step.peak_in_flight, shape.microbatches) << what;
      }
      auto computes = GatherComputes(group.get(), step);
      ASSERT_TRUE(computes.ok()) << computes.status();
      const StepIdle idle = IdleOf(*computes);
      for (double fraction : idle.idle) {
        EXPECT_GE(fraction, 0) << what;
        EXPECT_LT(fraction, 1) << what;
      }
    }
  }
}

TEST(Pipeline, EveryScheduleOnTwoRanksTrainsToTheOneProcessBits) {
  RunOnRanks(2, [](const RankContext& ctx) {
    EverySchedule(ctx, {{.kind = ScheduleKind::kGPipe, .ranks = 2, .microbatches = 4},
                        {.kind = ScheduleKind::kOneFOneB, .ranks = 2, .microbatches = 5},
                        {.kind = ScheduleKind::kOneFOneB, .ranks = 2, .microbatches = 1},
                        {.kind = ScheduleKind::kInterleaved, .ranks = 2, .microbatches = 4, .virtual_stages = 2},
                        {.kind = ScheduleKind::kZeroBubble, .ranks = 2, .microbatches = 5}});
  });
}

TEST(Pipeline, GPipeOneFOneBAndZeroBubbleOnThreeRanksTrainToTheOneProcessBits) {
  RunOnRanks(3, [](const RankContext& ctx) {
    EverySchedule(ctx, {{.kind = ScheduleKind::kGPipe, .ranks = 3, .microbatches = 5},
                        {.kind = ScheduleKind::kOneFOneB, .ranks = 3, .microbatches = 4},
                        {.kind = ScheduleKind::kZeroBubble, .ranks = 3, .microbatches = 4}});
  });
}

// bf16 mixed precision: bfloat16 activations and gradients cross the stages; the bits are still one process's.
TEST(Pipeline, BFloat16ActivationsCrossTheStagesAndTrainToTheOneProcessBits) {
  RunOnRanks(2, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> group = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(group, nullptr);
    auto train = [&](int p, ScheduleKind kind) {
      auto full = nn::MLP(kDims, {.seed = 7, .precision = nn::Precision::kBFloat16});
      auto model = PipelineParallelMlp::Create(*full, p > 1 ? group : nullptr, nullptr,
                                               {.kind = kind, .ranks = p, .microbatches = 4}, CrossEntropy());
      EXPECT_TRUE(model.ok()) << model.status();
      full.reset();
      std::unique_ptr<nn::Optimizer> optimizer = MakeOptimizer(Opt::kAdamW, (*model)->Parameters());
      optimizer->SetComputeCopies((*model)->ComputeCopies());
      for (int step = 0; step < kSteps; ++step) {
        const ddp_testing::Batch batch = BatchOf(step);
        optimizer->ZeroGrad();
        EXPECT_TRUE((*model)->TrainStep(batch.x, batch.labels).ok());
        optimizer->Step();
      }
      auto whole = nn::MLP(kDims, {.seed = 99});
      EXPECT_TRUE((*model)->GatherInto(*whole).ok());
      return WeightsOf(*whole);
    };
    const nn::TensorMap one = train(1, ScheduleKind::kOneFOneB);
    for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubble}) {
      ExpectSameTensors(train(2, kind), one, absl::StrCat("bf16 ", ScheduleName(kind)));
    }
  });
}

TEST(Pipeline, GPipeHoldsMoreActivationBytesThanOneFOneBOnTheFirstStage) {
  RunOnRanks(2, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> group = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(group, nullptr);
    const std::vector<int64_t> dims = {64, 256, 256, 8};
    std::map<ScheduleKind, int64_t> peak;
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
      auto model = nn::MLP(dims, {.seed = 1});
      auto plan = StagePlan::Make(*model, 2);
      std::vector<std::shared_ptr<PipelineStage>> mine = {
          std::make_shared<PipelineStage>(*model, plan->stages[ctx.rank])};
      auto runtime = PipelineRuntime::Create(*MakeSchedule({.kind = kind, .ranks = 2, .microbatches = 8}), group, mine,
                                             CrossEntropy());
      ASSERT_TRUE(runtime.ok()) << runtime.status();
      const ddp_testing::Batch batch = ddp_testing::MakeBatch(128, dims.front(), dims.back(), 3);
      ASSERT_TRUE((*runtime)->Step(*SplitBatch(batch.x, batch.labels, 8)).ok());
      peak[kind] = (*runtime)->last_step().peak_bytes;
    }
    // Stage 0 holds 8 microbatches' activations under GPipe, 2 under 1F1B: [16, 256] floats each, twice.
    if (ctx.rank == 0) {
      EXPECT_GT(peak[ScheduleKind::kGPipe], peak[ScheduleKind::kOneFOneB] + 4 * 16 * 256 * 4);
    }
  });
}


// pp = 2 over `pipeline` with `data` replicas: kSteps steps on replica `replica`'s batches, then the whole
// model and optimizer state gathered.
struct Gathered {
  std::shared_ptr<nn::Sequential> model;
  nn::TensorMap state;
  Tensor logits;
};
Gathered TrainPipelineMlp(std::shared_ptr<ProcessGroup> pipeline, std::shared_ptr<ProcessGroup> data, int p,
                          int replica, Opt kind, const nn::TensorMap* resume_state = nullptr,
                          const nn::Sequential* resume_model = nullptr, bool zero = false) {
  auto full = nn::MLP(kDims, {.seed = 7});
  auto model = PipelineParallelMlp::Create(*full, pipeline, data,
                                           {.kind = ScheduleKind::kOneFOneB, .ranks = p, .microbatches = 4},
                                           CrossEntropy());
  EXPECT_TRUE(model.ok()) << model.status();
  full.reset();
  std::unique_ptr<nn::Optimizer> optimizer = MakeOptimizer(kind, (*model)->Parameters());
  if (resume_model != nullptr) {
    EXPECT_TRUE((*model)->LoadFrom(*resume_model).ok());
    EXPECT_TRUE((*model)->LoadOptimizerState(*resume_state, *optimizer).ok());
  }
  std::unique_ptr<ShardedStageOptimizer> sharded;  // ZeRO-1 down the column: optimizer holds no state then
  if (zero) {
    auto made = ShardedStageOptimizer::Create(**model, data, [kind](std::vector<Variable> params) {
      return MakeOptimizer(kind, std::move(params));
    });
    EXPECT_TRUE(made.ok()) << made.status();
    sharded = *std::move(made);
    (*model)->set_average_over_data(false);
  }
  for (int step = 0; step < kSteps; ++step) {
    const ddp_testing::Batch batch = BatchOf(10 * replica + step);
    optimizer->ZeroGrad();
    absl::StatusOr<Tensor> loss = (*model)->TrainStep(batch.x, batch.labels);
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (sharded) {
      EXPECT_TRUE(sharded->Step().ok());
    } else {
      optimizer->Step();
    }
  }
  if (sharded) {  // the whole stage's state, gathered down the column, then into the vessel optimizer
    absl::StatusOr<nn::TensorMap> state = sharded->ConsolidatedStateTensors();
    EXPECT_TRUE(state.ok()) << state.status();
    EXPECT_TRUE(optimizer->LoadStateTensors(*state).ok());
  }
  Gathered out;
  out.model = nn::MLP(kDims, {.seed = 99});  // a vessel of other values: every parameter must be overwritten
  EXPECT_TRUE((*model)->GatherInto(*out.model).ok());
  absl::StatusOr<nn::TensorMap> state = (*model)->GatherOptimizerState(*optimizer);
  EXPECT_TRUE(state.ok()) << state.status();
  out.state = *state;
  autograd::NoGradGuard no_grad;
  out.logits = (*model)->Forward(Variable(BatchOf(50).x)).data();
  EXPECT_TRUE((*model)->status().ok()) << (*model)->status();
  return out;
}


TEST(PipelineParallelMlp, GathersTheOneProcessModelStateAndLogitsAndResumesFromThem) {
  RunOnRanks(2, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> group = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(group, nullptr);
    for (Opt kind : {Opt::kSgd, Opt::kAdamW}) {
      const std::string what = kind == Opt::kSgd ? "sgd" : "adamw";
      const Gathered one = TrainPipelineMlp(nullptr, nullptr, 1, 0, kind);
      const Gathered two = TrainPipelineMlp(group, nullptr, 2, 0, kind);
      ExpectSameTensors(WeightsOf(*two.model), WeightsOf(*one.model), what + " model");
      ExpectSameTensors(two.state, one.state, what + " optimizer state");
      ExpectSameTensors({{"logits", two.logits}}, {{"logits", one.logits}}, what + " logits");
      // Resumed at pp = 2 from the one-process model and state: on as the one process goes.
      const Gathered on_one = TrainPipelineMlp(nullptr, nullptr, 1, 0, kind, &one.state, one.model.get());
      const Gathered on_two = TrainPipelineMlp(group, nullptr, 2, 0, kind, &one.state, one.model.get());
      ExpectSameTensors(on_two.state, on_one.state, what + " resumed optimizer state");
      ExpectSameTensors({{"logits", on_two.logits}}, {{"logits", on_one.logits}}, what + " resumed logits");
    }
  });
}

TEST(PipelineParallelMlp, TwoPipelinesOfTwoStagesTrainLikeTwoReplicasOfOneStageWithAndWithoutZeroOne) {
  RunOnRanks(4, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    auto mesh = DeviceMesh::Create(*world, ctx.store, 2, 2);  // rows: pipelines of 2; columns: replicas
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const Gathered two = TrainPipelineMlp(mesh->tp_group, mesh->dp_group, 2, mesh->dp_index, Opt::kAdamW);
    const Gathered one = TrainPipelineMlp(nullptr, mesh->dp_group, 1, mesh->dp_index, Opt::kAdamW);  // pp = 1
    ExpectSameTensors(two.state, one.state, "dp 2 x pp 2 against dp 2 x pp 1");
    // ZeRO-1 down the columns: each replica steps half of its stage, and the result is the same bits.
    for (Opt kind : {Opt::kSgd, Opt::kAdamW}) {
      const Gathered plain = TrainPipelineMlp(mesh->tp_group, mesh->dp_group, 2, mesh->dp_index, kind);
      const Gathered zero = TrainPipelineMlp(mesh->tp_group, mesh->dp_group, 2, mesh->dp_index, kind, nullptr, nullptr,
                                             /*zero=*/true);
      ExpectSameTensors(WeightsOf(*zero.model), WeightsOf(*plain.model), "zero-1 model");
      ExpectSameTensors(zero.state, plain.state, "zero-1 optimizer state");
    }
  });
}

TEST(Pipeline, AStageWhoseNeighbourDiedFailsWithItsErrorInsteadOfHanging) {
  RunOnRanks(2, [](const RankContext& ctx) {
    std::shared_ptr<ProcessGroup> group = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(group, nullptr);
    auto model = nn::MLP(kDims, {.seed = 7});
    auto plan = StagePlan::Make(*model, 2);
    std::vector<std::shared_ptr<PipelineStage>> mine = {std::make_shared<PipelineStage>(*model, plan->stages[ctx.rank])};
    auto runtime = PipelineRuntime::Create(*MakeSchedule({.kind = ScheduleKind::kOneFOneB, .ranks = 2, .microbatches = 4}),
                                           group, mine, CrossEntropy());
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    ASSERT_TRUE(group->Barrier()->Wait().ok());
    if (ctx.rank == 1) std::_Exit(0);  // stage 1 is gone before the step: its sockets close
    const ddp_testing::Batch batch = BatchOf(0);
    const absl::StatusOr<Tensor> loss = (*runtime)->Step(*SplitBatch(batch.x, batch.labels, 4));
    ASSERT_FALSE(loss.ok());
    EXPECT_NE(loss.status().message().find("rank 1"), std::string::npos) << loss.status();
  });
}

TEST(Pipeline, RefusesAGroupThatDoesNotMatchTheSchedule) {
  auto model = nn::MLP(kDims);
  auto plan = StagePlan::Make(*model, 2);
  std::vector<std::shared_ptr<PipelineStage>> mine = {std::make_shared<PipelineStage>(*model, plan->stages[0])};
  auto runtime = PipelineRuntime::Create(*MakeSchedule({.kind = ScheduleKind::kGPipe, .ranks = 2, .microbatches = 2}),
                                         nullptr, mine, CrossEntropy());
  ASSERT_FALSE(runtime.ok());
  EXPECT_NE(runtime.status().message().find("needs a pipeline group of 2 ranks"), std::string::npos);
  const ddp_testing::Batch batch = BatchOf(0);
  EXPECT_FALSE(SplitBatch(batch.x, batch.labels, 12).ok());  // 11 rows
}

}  // namespace
}  // namespace tinyddp::dist::pipeline
