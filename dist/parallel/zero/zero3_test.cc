// ZeRO-3 (fully_sharded.h) on real processes over Gloo, against plain DDP:
//   * it trains to plain DDP's bits on 2 ranks (every sum is a + b) and within float reassociation on 3
//     (its layers are cut into blocks per layer, DDP's buckets per bucket: other ring orders), with SGD
//     and AdamW, and its consolidated state is plain DDP's;
//   * under bf16 (the gathers move the bfloat16 copies) and with gradient accumulation (NoSync) too, bit
//     for bit on 2 ranks; k micro-batches of b train like one batch of k*b within float reassociation;
//   * its trace holds each layer's gathers, compute and reduce-scatter;
//   * between steps a rank keeps 1/N of parameters, gradients and state; during a step at most two layers
//     are whole, measured by its own count and by the host allocator;
//   * its checkpoint (the gathered model, the consolidated state) round-trips at another number of ranks;
//   * it refuses what it cannot shard, and says what.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "dist/ddp/ddp.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "dist/parallel/zero/zero_testing.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/precision.h"
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

zero::OptimizerFactory Factory(Opt kind) {
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

// The bfloat16 compute copies of the model's parameters, by name (after GatherFullParameters under ZeRO-3).
nn::TensorMap ComputeCopies(const nn::Module& model) {
  nn::TensorMap map;
  for (const auto& [p, copy] : model.ComputeCopies()) map[p.name()] = copy;
  return map;
}

// The wrapper's forward, outside or inside its NoSync guard (DistributedDataParallel's and ZeRO-3's alike:
// only the forward decides whether the backward that follows synchronises).
template <typename Wrapper>
Variable ForwardOf(Wrapper& wrapper, const Variable& x, bool sync) {
  if (sync) return wrapper.Forward(x);
  auto no_sync = wrapper.NoSync();
  return wrapper.Forward(x);
}

// Backward of a micro-batch's mean loss weighted by its share of the step's examples, so that the
// gradients sum to the mean over all of them (ddp_mlp's --grad_accum_steps).
void BackwardShare(const Variable& loss, double share) {
  autograd::Backward(loss, Tensor::Full(loss.shape(), share, loss.dtype(), loss.device()));
}

// Plain DDP and ZeRO-3 side by side from the same start, fed the same batches, compared after every step.
// `micro_batches` per step: all but the last under NoSync, each backward seeded with its share (1/k), as
// ddp_mlp's --grad_accum_steps does.
void TrainBothAndCompare(const RankContext& ctx, Opt kind, nn::Precision precision = nn::Precision::kFloat32,
                         int micro_batches = 1) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  nn::MlpOptions mo;
  mo.seed = 7;
  mo.precision = precision;
  auto plain_model = nn::MLP(kDims, mo);
  auto zero_model = nn::MLP(kDims, mo);
  if (ctx.rank != 0) {  // both start from rank 0's weights
    ddp_testing::PerturbParameters(*plain_model, ctx.rank);
    ddp_testing::PerturbParameters(*zero_model, ctx.rank);
  }
  auto plain = DistributedDataParallel::Create(*plain_model, pg, SmallBuckets());
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::unique_ptr<nn::Optimizer> plain_opt = zero_testing::MakeOptimizer(kind, plain_model->Parameters());
  plain_opt->SetComputeCopies(plain_model->ComputeCopies());  // bf16: the step writes them; fp32: none
  auto fsdp = FullyShardedDataParallel::Create(zero_model, pg, Factory(kind));
  ASSERT_TRUE(fsdp.ok()) << fsdp.status();
  for (const auto& [name, p] : zero_model->NamedParameters()) EXPECT_EQ(p.numel(), 0) << name << " not emptied";
  for (const auto& [name, copy] : ComputeCopies(*zero_model)) EXPECT_EQ(copy.numel(), 0) << name << " copy kept";

  const bool exact = ctx.world_size <= 2;
  const std::string run = absl::StrCat(zero_testing::Name(kind), ", ", nn::PrecisionName(precision),
                                       micro_batches > 1 ? absl::StrCat(", ", micro_batches, " micro-batches") : "");
  for (int step = 0; step < 4; ++step) {
    plain_opt->ZeroGrad();
    for (int micro = 0; micro < micro_batches; ++micro) {
      const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(),
                                               300 + 10 * step + micro);
      const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
      const bool sync = micro + 1 == micro_batches;
      const double share = 1.0 / micro_batches;
      BackwardShare(autograd::CrossEntropy(ForwardOf(**plain, Variable(mine.x), sync), mine.labels), share);
      BackwardShare(autograd::CrossEntropy(ForwardOf(**fsdp, Variable(mine.x), sync), mine.labels), share);
      ASSERT_TRUE((*fsdp)->status().ok()) << (*fsdp)->status();
    }
    plain_opt->Step();  // ZeRO-3 stepped inside the last backward, once

    const std::string when = absl::StrCat("after step ", step + 1, " (", run, ") on ", ctx.world_size, " ranks");
    absl::StatusOr<nn::TensorMap> state = (*fsdp)->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok()) << state.status();
    if (kind == Opt::kAdamW) {
      EXPECT_EQ(state->at("state.0.step").Item(), step + 1) << "one optimizer step per step " << when;
    }
    ASSERT_TRUE((*fsdp)->GatherFullParameters().ok());
    if (exact) {
      zero_testing::ExpectSameBits(Parameters(*zero_model), Parameters(*plain_model), when);
      zero_testing::ExpectSameBits(*state, plain_opt->StateTensors(), absl::StrCat("state ", when));
      // bf16: what the next forward computes with, the gathered copies, are DDP's copies (the whole model's
      // copies are cast from the gathered masters here; the layers' bf16 outputs are compared below).
      zero_testing::ExpectSameBits(ComputeCopies(*zero_model), ComputeCopies(*plain_model),
                                   absl::StrCat("compute copies ", when));
    } else {
      zero_testing::ExpectNear(Parameters(*zero_model), Parameters(*plain_model), 1e-6, 1e-4, when);
      zero_testing::ExpectNear(*state, plain_opt->StateTensors(), 1e-6, 1e-3, absl::StrCat("state ", when));
    }
    ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
    (*fsdp)->ReleaseFullParameters();
  }
  // Evaluation through it, without a graph: the same logits as the plain model (exactly, on 2 ranks). Under
  // bf16 they are computed from the gathered bfloat16 copies, so this also checks those.
  const Batch test = ddp_testing::MakeBatch(4, kDims.front(), kDims.back(), 77);
  autograd::NoGradGuard no_grad;
  const Tensor got = (*fsdp)->Forward(Variable(test.x)).data(), want = plain_model->Forward(Variable(test.x)).data();
  if (exact) {
    zero_testing::ExpectSameBits({{"logits", got}}, {{"logits", want}}, "evaluation, " + run);
  } else {
    zero_testing::ExpectNear({{"logits", got}}, {{"logits", want}}, 1e-5, 1e-4, "evaluation, " + run);
  }
  // What it holds: under bf16 one bfloat16 copy per shard, and each all-gather moves those (half the bytes
  // of the float32 masters); with accumulation, every layer's sum was whole at once, then nothing is kept.
  const zero::FullyShardedMemory m = (*fsdp)->Memory();
  const bool bf16 = precision == nn::Precision::kBFloat16;
  EXPECT_EQ(m.compute_copy_bytes, bf16 ? 2 * m.shard_elements : 0) << run;
  EXPECT_EQ(m.largest_unit_bytes, bf16 ? m.largest_gradient_bytes / 2 : m.largest_gradient_bytes) << run;
  int64_t all_layers = 0;
  for (int64_t bytes : (*fsdp)->UnitBytes()) all_layers += bf16 ? 2 * bytes : bytes;  // their float32 gradients
  if (micro_batches > 1) {
    EXPECT_GE(m.peak_staging_bytes, all_layers) << "every layer's sum, whole, during accumulation: " << run;
  } else {
    EXPECT_LE(m.peak_staging_bytes, m.largest_gradient_bytes) << "one layer's gradient staged at a time: " << run;
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

TEST(ZeroThree, UnderBf16ItGathersTheBf16CopiesAndTrainsToPlainDdpsBitsOnTwoRanks) {
  RunOnRanks(2, [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) TrainBothAndCompare(ctx, kind, nn::Precision::kBFloat16);
  });
}

TEST(ZeroThree, AccumulatingUnderNoSyncItStepsOncePerStepAndMatchesPlainDdpsNoSyncBitForBit) {
  RunOnRanks(2, [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      TrainBothAndCompare(ctx, kind, nn::Precision::kFloat32, /*micro_batches=*/3);
    }
    TrainBothAndCompare(ctx, Opt::kAdamW, nn::Precision::kBFloat16, /*micro_batches=*/2);
  });
}

// k micro-batches of b examples, accumulated under NoSync, train as one batch of k*b: the same examples and
// the same mean, added in another order (each micro-batch's GEMMs sum over b rows, then the k sums are
// added), so equal within float reassociation, not bit for bit.
TEST(ZeroThree, KMicroBatchesOfBTrainLikeOneBatchOfKTimesBWithinFloatReassociation) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    constexpr int64_t k = 3, b = 2;
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      auto whole_model = nn::MLP(kDims, nn::MlpOptions{.seed = 11});
      auto micro_model = nn::MLP(kDims, nn::MlpOptions{.seed = 11});
      auto whole = FullyShardedDataParallel::Create(whole_model, pg, Factory(kind));
      auto micro = FullyShardedDataParallel::Create(micro_model, pg, Factory(kind));
      ASSERT_TRUE(whole.ok() && micro.ok());
      for (int step = 0; step < 4; ++step) {
        const Batch all = ddp_testing::MakeBatch(ctx.world_size * k * b, kDims.front(), kDims.back(), 700 + step);
        const Batch mine = ddp_testing::Rows(all, ctx.rank * k * b, (ctx.rank + 1) * k * b);
        autograd::Backward(autograd::CrossEntropy((*whole)->Forward(Variable(mine.x)), mine.labels));
        for (int64_t i = 0; i < k; ++i) {
          const Batch part = ddp_testing::Rows(mine, i * b, (i + 1) * b);
          BackwardShare(autograd::CrossEntropy(ForwardOf(**micro, Variable(part.x), i + 1 == k), part.labels),
                        1.0 / k);
        }
        ASSERT_TRUE((*whole)->status().ok() && (*micro)->status().ok());
      }
      const std::string what = absl::StrCat(k, " micro-batches of ", b, " against one of ", k * b, ", ",
                                            zero_testing::Name(kind));
      absl::StatusOr<nn::TensorMap> whole_state = (*whole)->ConsolidatedStateTensors();
      absl::StatusOr<nn::TensorMap> micro_state = (*micro)->ConsolidatedStateTensors();
      ASSERT_TRUE(whole_state.ok() && micro_state.ok());
      zero_testing::ExpectNear(*micro_state, *whole_state, 1e-6, 1e-3, "state, " + what);
      ASSERT_TRUE((*whole)->GatherFullParameters().ok());
      ASSERT_TRUE((*micro)->GatherFullParameters().ok());
      zero_testing::ExpectNear(Parameters(*micro_model), Parameters(*whole_model), 1e-6, 1e-4, what);
    }
  });
}

// The trace (FullyShardedOptions::tracer): per step, every layer's all_gather (twice but the last layer's:
// forward and backward), compute spans for each layer's forward and backward, one reduce_scatter per layer,
// and the step inside backward. Counts only: when Gloo's thread ran each collective varies from run to run.
TEST(ZeroThree, ItsTraceShowsEachLayersGathersComputeAndReduceScatter) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    Tracer tracer(ctx.rank, Device::CPU());
    auto model = nn::MLP(kDims, nn::MlpOptions{.seed = 4});
    auto fsdp = FullyShardedDataParallel::Create(model, pg, Factory(Opt::kSgdMomentum), {.tracer = &tracer});
    ASSERT_TRUE(fsdp.ok()) << fsdp.status();
    constexpr int kSteps = 2;
    for (int step = 0; step < kSteps; ++step) {
      const Batch batch = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), 60 + step + ctx.rank);
      Variable loss;
      {
        Tracer::Span forward = tracer.Scope("forward", step);  // the loop's own phases, as ddp_mlp records them
        loss = autograd::CrossEntropy((*fsdp)->Forward(Variable(batch.x)), batch.labels);
      }
      Tracer::Span backward = tracer.Scope("backward", step);
      autograd::Backward(loss);
    }
    ASSERT_TRUE((*fsdp)->status().ok());
    const nlohmann::json events = nlohmann::json::parse("[" + tracer.EventsJson() + "]");
    std::map<std::pair<std::string, int64_t>, int> count;  // (name, layer) -> spans
    for (const nlohmann::json& e : events) {
      if (e.value("ph", "") != "X") continue;
      const int64_t layer = e.contains("args") ? e["args"].value("i", int64_t{-1}) : -1;
      count[{e["name"].get<std::string>(), layer}] += 1;
      const bool comm = e["tid"].get<int>() == static_cast<int>(TraceTrack::kComm);
      EXPECT_EQ(comm, e["name"] == "all_gather" || e["name"] == "reduce_scatter") << e.dump();
    }
    const int64_t layers = static_cast<int64_t>((*fsdp)->UnitBytes().size());
    ASSERT_EQ(layers, 3);
    for (int64_t l = 0; l < layers; ++l) {
      const bool last = l + 1 == layers;  // kept whole from its forward to its backward: gathered once
      EXPECT_EQ((count[{"all_gather", l}]), kSteps * (last ? 1 : 2)) << "layer " << l;
      EXPECT_EQ((count[{"reduce_scatter", l}]), kSteps) << "layer " << l;
      EXPECT_EQ((count[{"forward layer", l}]), kSteps) << "layer " << l;
      EXPECT_EQ((count[{"backward layer", l}]), 2 * kSteps) << "layer " << l << ": dx, then dW and db";
    }
    EXPECT_EQ((count[{"optimizer", -1}]), kSteps);
  });
}

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
    auto frozen = nn::MLP(kDims, nn::MlpOptions{});
    frozen->Parameters()[0].set_requires_grad(false);
    const absl::Status a = FullyShardedDataParallel::Create(frozen, pg, Factory(Opt::kSgdMomentum)).status();
    EXPECT_NE(a.message().find("frozen parameter"), std::string::npos) << a;
    auto nested = std::make_shared<nn::Sequential>();
    nested->Append(nn::MLP(kDims, nn::MlpOptions{}));
    const absl::Status b = FullyShardedDataParallel::Create(nested, pg, Factory(Opt::kSgdMomentum)).status();
    EXPECT_NE(b.message().find("nn::Linear layers only"), std::string::npos) << b;
  });
}

}  // namespace
}  // namespace tinyddp::dist
