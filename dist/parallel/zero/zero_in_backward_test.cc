// ZeRO-1/2 with the optimizer inside backward (ZeroOptions::in_backward, `--optimizer_in_backward`) on real
// Gloo processes at 1, 2 and 3 ranks, against the same ZeRO stepping after backward: SGD and AdamW, float32
// and bf16, through DDP's one-time bucket rebuild and with gradient accumulation. Each bucket's block gets
// the same arithmetic either way, so the parameters, their bf16 compute copies and the whole optimizer
// state (consolidated) must agree bit for bit after every step.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/gradient_shards.h"
#include "dist/parallel/zero/reduce_scatter_hook.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/parallel/zero/zero_testing.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/precision.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using zero::GradientShards;
using zero::ZeroRedundancyOptimizer;
using zero_testing::Opt;

// Five layers in small buckets: several buckets land while backward still computes earlier layers.
const std::vector<int64_t> kDims = {13, 29, 23, 19, 17, 5};
constexpr int64_t kPerRankBatch = 3;
constexpr int kSteps = 4;

// One ZeRO run: its model, DDP, the optimizer and (ZeRO-2) the gradient shards.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::shared_ptr<GradientShards> shards;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
};

Run Make(const RankContext& ctx, const std::shared_ptr<ProcessGroup>& pg, int stage, Opt kind,
         nn::Precision precision, bool in_backward) {
  Run run;
  nn::MlpOptions mo;
  mo.seed = 7;
  mo.precision = precision;
  run.model = nn::MLP(kDims, mo);
  if (ctx.rank != 0) ddp_testing::PerturbParameters(*run.model, ctx.rank);  // DDP broadcasts rank 0's
  DdpOptions o;
  o.first_bucket_bytes = 256;
  o.bucket_cap_bytes = 900;
  if (stage == 1) {
    o.comm_hook = zero::ReduceScatterHook(*pg);
  } else {
    run.shards = GradientShards::Create(*pg);
    o.comm_hook = run.shards->Hook();
    o.gradient_as_bucket_view = false;
  }
  auto ddp = DistributedDataParallel::Create(*run.model, pg, o);
  EXPECT_TRUE(ddp.ok()) << ddp.status();
  if (!ddp.ok()) return run;
  run.ddp = *std::move(ddp);
  auto zero = ZeroRedundancyOptimizer::Attach(
      *run.ddp, [kind](std::vector<Variable> params) { return zero_testing::MakeOptimizer(kind, std::move(params)); },
      run.shards, {.in_backward = in_backward});
  EXPECT_TRUE(zero.ok()) << zero.status();
  if (zero.ok()) run.zero = *std::move(zero);
  return run;
}

nn::TensorMap ComputeCopies(const nn::Module& module) {
  nn::TensorMap copies;
  for (const auto& [p, copy] : module.ComputeCopies()) copies[p.name()] = copy;
  return copies;
}

// The same ZeRO, stepping after backward and inside it, fed the same batches; `accumulate`: two micro-batches
// per step, the first under NoSync (no callback runs: only the last micro-step updates).
void CompareTimings(const RankContext& ctx, int stage, Opt kind, nn::Precision precision, bool accumulate) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  Run after = Make(ctx, pg, stage, kind, precision, /*in_backward=*/false);
  Run inside = Make(ctx, pg, stage, kind, precision, /*in_backward=*/true);
  ASSERT_TRUE(after.zero && inside.zero);
  EXPECT_TRUE(inside.zero->in_backward());
  int updated_in_backward = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (Run* run : {&after, &inside}) {
      run->model->ZeroGrad(/*set_to_none=*/step % 2 == 0);
      for (int micro = accumulate ? 0 : 1; micro < 2; ++micro) {
        const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(),
                                                 500 + 10 * step + micro);
        const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
        if (micro == 0) {
          auto guard = run->ddp->NoSync();
          autograd::Backward(autograd::CrossEntropy(run->ddp->Forward(Variable(mine.x)), mine.labels));
        } else {
          autograd::Backward(autograd::CrossEntropy(run->ddp->Forward(Variable(mine.x)), mine.labels));
        }
      }
      ASSERT_TRUE(run->ddp->status().ok()) << run->ddp->status();
    }
    updated_in_backward = std::max(updated_in_backward, inside.ddp->reducer().buckets_finished_in_backward());
    EXPECT_EQ(after.ddp->reducer().buckets_finished_in_backward(), 0);
    const std::string when = absl::StrCat("ZeRO-", stage, ", ", zero_testing::Name(kind), ", ",
                                          nn::PrecisionName(precision), accumulate ? ", accumulated" : "",
                                          ", step ", step + 1, " on ", ctx.world_size, " rank(s)");
    zero_testing::ExpectSameBits(ComputeCopies(*inside.model), ComputeCopies(*after.model),
                                 absl::StrCat("compute copies, ", when));
    absl::StatusOr<nn::TensorMap> inside_state = inside.zero->ConsolidatedStateTensors();
    absl::StatusOr<nn::TensorMap> after_state = after.zero->ConsolidatedStateTensors();
    ASSERT_TRUE(inside_state.ok() && after_state.ok()) << inside_state.status() << after_state.status();
    zero_testing::ExpectSameBits(*inside_state, *after_state, absl::StrCat("optimizer state, ", when));
    // (After the consolidation, under bf16 too, the float32 parameters are whole on every rank.)
    ddp_testing::ExpectParametersNear(*inside.model, *after.model, 0, 0, when);
    ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *inside.model, when);
  }
  EXPECT_TRUE(inside.ddp->reducer().buckets_rebuilt());  // the re-sharding after step 1 was part of the run
  // Some bucket really was stepped before backward ended (the rest at its end: reducer.h's kInBackward). At
  // one rank a collective lands at once; over sockets it may outlast this tiny model's backward, so there the
  // timing is not asserted (the bits are, either way).
  if (ctx.world_size == 1) {
    EXPECT_GE(updated_in_backward, 1) << "of " << inside.ddp->reducer().num_buckets() << " buckets";
  }
}

class ZeroInBackward : public ::testing::TestWithParam<int> {};

TEST_P(ZeroInBackward, StepsEachBucketDuringBackwardToTheBitsOfTheStepAfterIt) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (int stage : {1, 2}) {
      for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
        for (nn::Precision precision : {nn::Precision::kFloat32, nn::Precision::kBFloat16}) {
          CompareTimings(ctx, stage, kind, precision, /*accumulate=*/false);
        }
      }
    }
  });
}

TEST_P(ZeroInBackward, WithGradientAccumulationUpdatesOnlyOnTheLastMicroStep) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (int stage : {1, 2}) CompareTimings(ctx, stage, Opt::kAdamW, nn::Precision::kFloat32, /*accumulate=*/true);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroInBackward, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

}  // namespace
}  // namespace tinyddp::dist
