// ZeRO-3 (fully_sharded.h) on real processes over Gloo, against plain DDP:
//   * it trains to plain DDP's bits on 2 ranks (every sum is a + b) and within float reassociation on 3
//     (its layers are cut into blocks per layer, DDP's buckets per bucket: other ring orders), with SGD
//     and AdamW, and its consolidated state is plain DDP's;
//   * between steps a rank keeps 1/N of parameters, gradients and state; during a step at most two layers
//     are whole, measured by its own count and by the host allocator;
//   * its checkpoint (the gathered model, the consolidated state) round-trips at another number of ranks;
//   * it refuses what it cannot shard, and says what.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "dist/parallel/zero/zero_testing.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/storage.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using zero::FullyShardedDataParallel;
using zero_testing::Opt;

// Odd sizes: no layer divides evenly into blocks.
const std::vector<int64_t> kDims = {13, 17, 11, 5};
constexpr int64_t kPerRankBatch = 3;

DistributedDataParallel::OptimizerFactory Factory(Opt kind) {
  return [kind](std::vector<Variable> params) { return zero_testing::MakeOptimizer(kind, std::move(params)); };
}

DdpOptions SmallBuckets() {
  DdpOptions o;
  o.first_bucket_bytes = 256;
  o.bucket_cap_bytes = 700;
  return o;
}

// The model's parameters by name (after GatherFullParameters under ZeRO-3).
nn::TensorMap Parameters(const nn::Module& model) {
  nn::TensorMap map;
  for (const auto& [name, p] : model.NamedParameters()) map[name] = p.data();
  return map;
}

void TrainBothAndCompare(const RankContext& ctx, Opt kind) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  nn::MlpOptions mo;
  mo.seed = 7;
  auto plain_model = nn::MLP(kDims, mo);
  auto zero_model = nn::MLP(kDims, mo);
  if (ctx.rank != 0) {  // both start from rank 0's weights
    ddp_testing::PerturbParameters(*plain_model, ctx.rank);
    ddp_testing::PerturbParameters(*zero_model, ctx.rank);
  }
  auto plain = DistributedDataParallel::Create(*plain_model, pg, SmallBuckets());
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::unique_ptr<nn::Optimizer> plain_opt = zero_testing::MakeOptimizer(kind, plain_model->Parameters());
  auto fsdp = FullyShardedDataParallel::Create(zero_model, pg, Factory(kind));
  ASSERT_TRUE(fsdp.ok()) << fsdp.status();
  for (const auto& [name, p] : zero_model->NamedParameters()) EXPECT_EQ(p.numel(), 0) << name << " not emptied";

  const bool exact = ctx.world_size <= 2;
  for (int step = 0; step < 4; ++step) {
    const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(), 300 + step);
    const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
    plain_opt->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(mine.x)), mine.labels));
    plain_opt->Step();
    autograd::Backward(autograd::CrossEntropy((*fsdp)->Forward(Variable(mine.x)), mine.labels));  // steps inside
    ASSERT_TRUE((*fsdp)->status().ok()) << (*fsdp)->status();

    const std::string when = absl::StrCat("after ", zero_testing::Name(kind), " step ", step + 1, " on ",
                                          ctx.world_size, " ranks");
    absl::StatusOr<nn::TensorMap> state = (*fsdp)->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE((*fsdp)->GatherFullParameters().ok());
    if (exact) {
      zero_testing::ExpectSameBits(Parameters(*zero_model), Parameters(*plain_model), when);
      zero_testing::ExpectSameBits(*state, plain_opt->StateTensors(), absl::StrCat("state ", when));
    } else {
      zero_testing::ExpectNear(Parameters(*zero_model), Parameters(*plain_model), 1e-6, 1e-4, when);
      zero_testing::ExpectNear(*state, plain_opt->StateTensors(), 1e-6, 1e-3, absl::StrCat("state ", when));
    }
    ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
    (*fsdp)->ReleaseFullParameters();
  }
  // Evaluation through it, without a graph: the same logits as the plain model (exactly, on 2 ranks).
  const Batch test = ddp_testing::MakeBatch(4, kDims.front(), kDims.back(), 77);
  autograd::NoGradGuard no_grad;
  const Tensor got = (*fsdp)->Forward(Variable(test.x)).data(), want = plain_model->Forward(Variable(test.x)).data();
  if (exact) {
    zero_testing::ExpectSameBits({{"logits", got}}, {{"logits", want}}, "evaluation");
  } else {
    zero_testing::ExpectNear({{"logits", got}}, {{"logits", want}}, 1e-5, 1e-4, "evaluation");
  }
}

class ZeroThree : public ::testing::TestWithParam<int> {};

TEST_P(ZeroThree, TrainsToPlainDdpsBitsOnTwoRanksAndWithinFloatReassociationOnThree) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) TrainBothAndCompare(ctx, kind);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroThree, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

TEST(ZeroThree, ARankKeepsOneNthBetweenStepsAndAtMostTwoLayersWholeDuringAStepMeasuredByTheAllocator) {
  RunOnRanks(4, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    const std::vector<int64_t> dims = {32, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 16};
    constexpr int64_t kBatch = 4;
    const Batch batch = ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 5 + ctx.rank);
    auto step = [&](auto& forward) {
      autograd::Backward(autograd::CrossEntropy(forward(Variable(batch.x)), batch.labels));
    };
    // Plain DDP with SGD (momentum): parameters, gradients and momentum, all whole.
    int64_t ddp_rest = 0, params = 0;
    {
      const int64_t base = GetHostMemoryStats().live_bytes;
      auto model = nn::MLP(dims, nn::MlpOptions{});
      params = model->NumParameters();
      auto ddp = DistributedDataParallel::Create(*model, pg, DdpOptions{});
      ASSERT_TRUE(ddp.ok());
      std::unique_ptr<nn::Optimizer> sgd = zero_testing::MakeOptimizer(Opt::kSgdMomentum, model->Parameters());
      auto forward = [&](const Variable& x) { return (*ddp)->Forward(x); };
      for (int i = 0; i < 2; ++i) {
        sgd->ZeroGrad(/*set_to_none=*/false);
        step(forward);
        sgd->Step();
      }
      ddp_rest = GetHostMemoryStats().live_bytes - base;
    }
    const int64_t base = GetHostMemoryStats().live_bytes;
    auto model = nn::MLP(dims, nn::MlpOptions{});
    auto fsdp = FullyShardedDataParallel::Create(model, pg, Factory(Opt::kSgdMomentum));
    ASSERT_TRUE(fsdp.ok()) << fsdp.status();
    auto forward = [&](const Variable& x) { return (*fsdp)->Forward(x); };
    for (int i = 0; i < 2; ++i) step(forward);
    // Gloo's worker releases a collective's closure (the last staged gradient) just after completing it: a
    // barrier behind it makes sure that has happened before counting.
    ASSERT_TRUE(pg->Barrier()->Wait().ok());
    const int64_t rest = GetHostMemoryStats().live_bytes - base;
    ResetHostPeak();
    step(forward);
    const int64_t peak = GetHostMemoryStats().peak_bytes - base;
    ASSERT_TRUE((*fsdp)->status().ok());
    const zero::FullyShardedMemory m = (*fsdp)->Memory();

    // Between steps: the three shards, nothing else (a few hundred bytes of crumbs).
    const int64_t shards = m.parameter_bytes + m.gradient_bytes + m.optimizer_state_bytes;
    EXPECT_EQ(m.parameter_bytes, 4 * m.shard_elements);
    EXPECT_LE(rest, shards + 1024);
    EXPECT_LE(4 * m.shard_elements, 4 * ((params + 3) / 4) + 4 * 2 * 12);  // ceil(P/4) + a little padding a layer
    EXPECT_GE(ddp_rest, 3 * 4 * params);                                 // DDP: 12P
    EXPECT_LT(rest, ddp_rest / 3);
    // During a step: whole layers, by its count: two at most.
    EXPECT_LE(m.peak_gathered_bytes, 2 * m.largest_unit_bytes);
    EXPECT_LE(m.peak_staging_bytes, m.largest_unit_bytes);
    // And by the allocator: the rest, two layers of parameters, one of staged gradients, and the
    // activations and their gradients (a few per layer of [kBatch, 64] floats).
    const int64_t activations = 4 * kBatch * 64 * 4 * static_cast<int64_t>(dims.size());
    EXPECT_LE(peak, rest + 3 * m.largest_unit_bytes + activations);
    EXPECT_LT(peak, ddp_rest / 2);
    if (ctx.rank == 0) {
      std::printf("ZeRO-3 on 4 ranks, P = %lld: DDP holds %lld bytes between steps; ZeRO-3 %lld, peak %lld "
                  "(one layer %lld); %s\n",
                  static_cast<long long>(params), static_cast<long long>(ddp_rest), static_cast<long long>(rest),
                  static_cast<long long>(peak), static_cast<long long>(m.largest_unit_bytes), m.ToString().c_str());
    }
  });
}

TEST(ZeroThree, ItsCheckpointIsOneProcesssModelAndStateAndResumesAtAnotherRankCount) {
  const std::string dir = ::testing::TempDir();
  const std::string model_path = dir + "/zero3_model.safetensors", state_path = dir + "/zero3_state.safetensors";
  // 2 ranks train 3 steps of AdamW and write the model (gathered) and the state (consolidated).
  RunOnRanks(2, [&](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = nn::MLP(kDims, nn::MlpOptions{.seed = 3});
    auto fsdp = FullyShardedDataParallel::Create(model, pg, Factory(Opt::kAdamW));
    ASSERT_TRUE(fsdp.ok());
    for (int step = 0; step < 3; ++step) {
      const Batch b = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), 40 + step + 10 * ctx.rank);
      autograd::Backward(autograd::CrossEntropy((*fsdp)->Forward(Variable(b.x)), b.labels));
    }
    absl::StatusOr<nn::TensorMap> state = (*fsdp)->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE((*fsdp)->GatherFullParameters().ok());
    if (ctx.rank == 0) {
      ASSERT_TRUE(nn::SaveModule(*model, model_path).ok());  // the names and shapes one process writes
      ASSERT_TRUE(nn::SaveSafetensors(state_path, *state).ok());
    }
    ASSERT_TRUE(pg->Barrier()->Wait().ok());
  });
  // 3 ranks load them into a fresh model, shard it, and give back the same files' contents, bit for bit.
  RunOnRanks(3, [&](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = nn::MLP(kDims, nn::MlpOptions{.seed = 99});
    ASSERT_TRUE(nn::LoadModule(*model, model_path).ok());
    const nn::TensorMap saved_model = Parameters(*model);
    nn::TensorMap model_copy;
    for (const auto& [name, t] : saved_model) model_copy[name] = t.Clone();
    auto fsdp = FullyShardedDataParallel::Create(model, pg, Factory(Opt::kAdamW));
    ASSERT_TRUE(fsdp.ok());
    absl::StatusOr<nn::SafetensorsContents> state = nn::LoadSafetensors(state_path);
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE((*fsdp)->LoadConsolidatedStateTensors(state->tensors).ok());
    absl::StatusOr<nn::TensorMap> again = (*fsdp)->ConsolidatedStateTensors();
    ASSERT_TRUE(again.ok());
    zero_testing::ExpectSameBits(*again, state->tensors, "the state, through 3 ranks");
    ASSERT_TRUE((*fsdp)->GatherFullParameters().ok());
    zero_testing::ExpectSameBits(Parameters(*model), model_copy, "the model, through 3 ranks");
    (*fsdp)->ReleaseFullParameters();
    // And it trains on from there (the state loaded: Adam's step continues at 4).
    const Batch b = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), 90 + ctx.rank);
    autograd::Backward(autograd::CrossEntropy((*fsdp)->Forward(Variable(b.x)), b.labels));
    ASSERT_TRUE((*fsdp)->status().ok());
    absl::StatusOr<nn::TensorMap> after = (*fsdp)->ConsolidatedStateTensors();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->at("state.0.step").Item(), 4);
  });
}

TEST(ZeroThree, RefusesWhatItCannotShardAndSaysWhat) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto bf16 = nn::MLP(kDims, nn::MlpOptions{.precision = nn::Precision::kBFloat16});
    const absl::Status a = FullyShardedDataParallel::Create(bf16, pg, Factory(Opt::kSgdMomentum)).status();
    EXPECT_NE(a.message().find("bf16"), std::string::npos) << a;
    auto nested = std::make_shared<nn::Sequential>();
    nested->Append(nn::MLP(kDims, nn::MlpOptions{}));
    const absl::Status b = FullyShardedDataParallel::Create(nested, pg, Factory(Opt::kSgdMomentum)).status();
    EXPECT_NE(b.message().find("nn::Linear layers only"), std::string::npos) << b;
  });
}

}  // namespace
}  // namespace tinyddp::dist
