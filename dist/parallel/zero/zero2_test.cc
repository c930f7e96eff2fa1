// ZeRO-2 (gradient_shards.h + ZeroRedundancyOptimizer) on real processes over Gloo, against plain DDP:
//   * it trains to the same bits (2 and 3 ranks; SGD and AdamW; float32 and bf16; through the bucket
//     rebuild; gradient accumulation under NoSync), and its consolidated state is plain DDP's;
//   * after backward the parameters hold no gradient, and the gradient bytes a rank keeps, measured by the
//     host allocator, are its blocks (1/N), not the model's 4P; during backward one bucket is staged at a time;
//   * it attaches only to a DDP in the coalesced layout with its hook, and says so.
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
#include "tensor/storage.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using zero::GradientShards;
using zero::ZeroRedundancyOptimizer;
using zero_testing::Opt;

// Odd sizes: no bucket divides evenly into blocks, and blocks cut parameters apart.
const std::vector<int64_t> kDims = {13, 17, 11, 5};
constexpr int64_t kPerRankBatch = 3;

DdpOptions SmallBuckets() {
  DdpOptions o;
  o.first_bucket_bytes = 256;  // the 3 layers' gradients over several buckets
  o.bucket_cap_bytes = 700;
  return o;
}

// The DDP ZeRO-2 attaches to: the same buckets, coalesced, staged and reduce-scattered into `shards`.
DdpOptions ZeroTwoBuckets(GradientShards& shards, DdpOptions o = SmallBuckets()) {
  o.gradient_as_bucket_view = false;
  o.comm_hook = shards.Hook();
  return o;
}

zero::OptimizerFactory Factory(Opt kind) {
  return [kind](std::vector<Variable> params) { return zero_testing::MakeOptimizer(kind, std::move(params)); };
}

// Plain DDP and ZeRO-2 side by side from the same start, fed the same batches; `accumulate`: two
// micro-batches per step, the first under NoSync.
void TrainBothAndCompare(const RankContext& ctx, Opt kind, nn::Precision precision, bool accumulate = false) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  nn::MlpOptions mo;
  mo.seed = 7;
  mo.precision = precision;
  auto plain_model = nn::MLP(kDims, mo);
  auto zero_model = nn::MLP(kDims, mo);
  if (ctx.rank != 0) {
    ddp_testing::PerturbParameters(*plain_model, ctx.rank);
    ddp_testing::PerturbParameters(*zero_model, ctx.rank);
  }
  auto plain = DistributedDataParallel::Create(*plain_model, pg, SmallBuckets());
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::shared_ptr<GradientShards> shards = GradientShards::Create(*pg);
  auto zero = DistributedDataParallel::Create(*zero_model, pg, ZeroTwoBuckets(*shards));
  ASSERT_TRUE(zero.ok()) << zero.status();
  std::unique_ptr<nn::Optimizer> plain_opt = zero_testing::MakeOptimizer(kind, plain_model->Parameters());
  plain_opt->SetComputeCopies(plain_model->ComputeCopies());
  auto sharded = ZeroRedundancyOptimizer::Attach(**zero, Factory(kind), shards);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_STREQ((*zero)->BucketPath(0), "Gloo reduce_scatter to shards");
  EXPECT_NE((*sharded)->ShardTable().find("ZeRO-2"), std::string::npos) << (*sharded)->ShardTable();

  for (int step = 0; step < 4; ++step) {
    plain_opt->ZeroGrad();
    zero_model->ZeroGrad(/*set_to_none=*/step % 2 == 0);
    for (int micro = accumulate ? 0 : 1; micro < 2; ++micro) {
      const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(),
                                               300 + 10 * step + micro);
      const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
      for (DistributedDataParallel* ddp : {plain->get(), zero->get()}) {
        if (micro == 0) {
          auto guard = ddp->NoSync();
          autograd::Backward(autograd::CrossEntropy(ddp->Forward(Variable(mine.x)), mine.labels));
        } else {
          autograd::Backward(autograd::CrossEntropy(ddp->Forward(Variable(mine.x)), mine.labels));
        }
      }
    }
    plain_opt->Step();
    ASSERT_TRUE((*zero)->status().ok()) << (*zero)->status();
    const std::string when = absl::StrCat("after ", zero_testing::Name(kind), " step ", step + 1, " on ",
                                          ctx.world_size, " ranks, ", nn::PrecisionName(precision),
                                          accumulate ? ", accumulated" : "");
    for (const auto& [name, p] : zero_model->NamedParameters()) {
      EXPECT_FALSE(p.grad().defined()) << name << " keeps a gradient " << when;
    }
    absl::StatusOr<nn::TensorMap> state = (*sharded)->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok()) << state.status();
    zero_testing::ExpectSameBits(*state, plain_opt->StateTensors(), absl::StrCat("optimizer state ", when));
    ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, when);
    ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
  }
  EXPECT_TRUE((*zero)->reducer().buckets_rebuilt());
}

class ZeroTwo : public ::testing::TestWithParam<int> {};

TEST_P(ZeroTwo, TrainsToTheSameBitsAsPlainDdpAndItsStateIsPlainDdpsState) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) TrainBothAndCompare(ctx, kind, nn::Precision::kFloat32);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroTwo, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

TEST(ZeroTwo, UnderBf16AndWithGradientAccumulationItStillMatchesPlainDdpBitForBit) {
  RunOnRanks(3, [](const RankContext& ctx) {
    TrainBothAndCompare(ctx, Opt::kAdamW, nn::Precision::kBFloat16);
    TrainBothAndCompare(ctx, Opt::kSgdMomentum, nn::Precision::kFloat32, /*accumulate=*/true);
  });
}

// Bytes of live host tensors now, relative to `base`.
int64_t LiveSince(int64_t base) { return GetHostMemoryStats().live_bytes - base; }

TEST(ZeroTwo, BetweenStepsARankKeepsOnlyItsGradientBlocksMeasuredByTheAllocatorAndStagesOneBucketAtATime) {
  RunOnRanks(4, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    // Many small layers, so that the largest bucket is small next to the model.
    const std::vector<int64_t> dims = {32, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 16};
    DdpOptions buckets;  // a bucket closes once it reaches the cap: one layer (64x64 and its bias) each
    buckets.first_bucket_bytes = buckets.bucket_cap_bytes = 8 << 10;
    const Batch batch = ddp_testing::MakeBatch(8, dims.front(), dims.back(), 5 + ctx.rank);
    // What a rank holds between steps, measured by the allocator: the model (flat, padded), the optimizer
    // state and the gradients. For ZeRO-1 and -2 alike, then compared.
    int64_t held[3] = {0, 0, 0};
    int64_t grad_bound = 0, params = 0;
    for (int stage : {1, 2}) {
      const int64_t base = GetHostMemoryStats().live_bytes;
      auto model = nn::MLP(dims, nn::MlpOptions{});
      params = model->NumParameters();
      std::shared_ptr<GradientShards> shards = GradientShards::Create(*pg);
      DdpOptions options = buckets;
      if (stage == 1) options.comm_hook = zero::ReduceScatterHook(*pg);
      auto ddp = DistributedDataParallel::Create(*model, pg, stage == 2 ? ZeroTwoBuckets(*shards, buckets) : options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      auto sharded = ZeroRedundancyOptimizer::Attach(**ddp, Factory(Opt::kSgdMomentum), stage == 2 ? shards : nullptr);
      ASSERT_TRUE(sharded.ok()) << sharded.status();
      for (int step = 0; step < 3; ++step) {
        model->ZeroGrad();
        autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(batch.x)), batch.labels));
        ASSERT_TRUE((*ddp)->status().ok());
      }
      ASSERT_TRUE(pg->Barrier()->Wait().ok());  // Gloo's worker has released its last closure
      const zero::ShardMemory m = (*sharded)->Memory();
      held[stage] = LiveSince(base) - m.parameter_bytes - m.optimizer_state_bytes;  // the gradients, and crumbs
      EXPECT_EQ(m.stage, stage);
      if (stage == 2) {
        int64_t largest = 0;  // the largest bucket, padded
        for (int b = 0; b < (*ddp)->reducer().num_buckets(); ++b) {
          largest = std::max(largest, 4 * shards->ShardNumel((*ddp)->reducer().grad_bucket(b).numel, 4) * ctx.world_size);
        }
        EXPECT_EQ(m.gradient_bytes, 4 * m.shard_elements);  // its blocks: nothing stays staged between steps
        EXPECT_GT(m.peak_staging_bytes, 0);
        // One bucket staged at a time, during backward: the cap and the parameter that closed the bucket (at
        // most a 64x64 weight), padded; the first step's buckets (before the rebuild) included.
        EXPECT_LE(m.peak_staging_bytes, std::max(largest, buckets.bucket_cap_bytes + 4 * 64 * 64 + 4 * 64 * 4));
        grad_bound = 4 * m.shard_elements;
      } else {
        EXPECT_GE(m.gradient_bytes, 4 * params);  // every bucket, whole
      }
    }
    // ZeRO-1 keeps every bucket whole (4P and padding); ZeRO-2 its blocks (about 4P/4).
    EXPECT_GE(held[1], 4 * params);
    EXPECT_LE(held[2], grad_bound + 1024) << "gradient bytes a ZeRO-2 rank keeps between steps";
    EXPECT_LT(held[2], held[1] / 3);
    if (ctx.rank == 0) {
      std::printf("gradient bytes held between steps, 4 ranks, P = %lld: ZeRO-1 %lld, ZeRO-2 %lld (bound %lld)\n",
                  static_cast<long long>(params), static_cast<long long>(held[1]), static_cast<long long>(held[2]),
                  static_cast<long long>(grad_bound));
    }
  });
}

TEST(ZeroTwo, RefusesAFlatBucketDdpAndTheOtherWayRound) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = nn::MLP(kDims, nn::MlpOptions{});
    std::shared_ptr<GradientShards> shards = GradientShards::Create(*pg);
    DdpOptions flat = SmallBuckets();
    flat.comm_hook = shards->Hook();  // the hook, but flat buckets
    auto a = DistributedDataParallel::Create(*model, pg, flat);
    ASSERT_TRUE(a.ok());
    const absl::Status refused = ZeroRedundancyOptimizer::Attach(**a, Factory(Opt::kSgdMomentum), shards).status();
    EXPECT_NE(refused.message().find("ZeRO-2 keeps no flat buckets"), std::string::npos) << refused;
    a->reset();
    DdpOptions zero_one = SmallBuckets();
    zero_one.comm_hook = zero::ReduceScatterHook(*pg);
    zero_one.gradient_as_bucket_view = false;
    auto b = DistributedDataParallel::Create(*model, pg, zero_one);
    ASSERT_TRUE(b.ok());
    const absl::Status wrong_hook = ZeroRedundancyOptimizer::Attach(**b, Factory(Opt::kSgdMomentum), shards).status();
    EXPECT_NE(wrong_hook.message().find("GradientShards::Hook"), std::string::npos) << wrong_hook;
  });
}

}  // namespace
}  // namespace tinyddp::dist
