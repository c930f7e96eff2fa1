// ZeRO-1 on real processes over Gloo (2, 3 and 4 ranks), against plain DDP:
//   * it trains to the same bits, with SGD (momentum, weight decay) and AdamW, through the one-time bucket
//     rebuild, with blocks that cut parameters and buckets whose last blocks are padding;
//   * each rank holds ceil(P/N) elements plus padding of optimizer state and of master weights;
//   * its consolidated state is plain DDP's optimizer state, bit for bit;
//   * the Gloo reduce-scatter then all-gather over ZeRO's blocks equals Gloo's all_reduce bit for bit
//     (the property the first claim rests on), at bucket sizes past Gloo's 1 MiB segments too;
//   * it attaches only to a DDP whose buckets it can carry, and says what is missing.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/reduce_scatter_hook.h"
#include "dist/parallel/zero/shard_layout.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
#include "nn/precision.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using zero::ZeroRedundancyOptimizer;

// Odd sizes: no bucket divides evenly into blocks, and blocks cut parameters apart.
const std::vector<int64_t> kDims = {13, 17, 11, 5};
constexpr int64_t kPerRankBatch = 3;
constexpr int kSteps = 5;

enum class Opt { kSgdMomentum, kAdamW };

zero::OptimizerFactory Factory(Opt kind) {
  if (kind == Opt::kSgdMomentum) {
    return [](std::vector<Variable> params) -> std::unique_ptr<nn::Optimizer> {
      nn::SgdOptions o;
      o.lr = 0.1;
      o.momentum = 0.9;
      o.weight_decay = 1e-3;
      return std::make_unique<nn::SGD>(std::move(params), o);
    };
  }
  return [](std::vector<Variable> params) -> std::unique_ptr<nn::Optimizer> {
    nn::AdamWOptions o;
    o.lr = 1e-2;
    return std::make_unique<nn::AdamW>(std::move(params), o);
  };
}

const char* Name(Opt kind) { return kind == Opt::kSgdMomentum ? "SGD(momentum=0.9, wd)" : "AdamW"; }

DdpOptions SmallBuckets() {
  DdpOptions o;
  o.first_bucket_bytes = 256;  // the 3 layers' gradients over several buckets
  o.bucket_cap_bytes = 700;
  return o;
}

// The same buckets, padded and reduce-scattered over `pg`: the DDP ZeRO-1 attaches to.
DdpOptions ZeroBuckets(const ProcessGroup& pg) {
  DdpOptions o = SmallBuckets();
  o.comm_hook = zero::ReduceScatterHook(pg);
  return o;
}

// Expects two maps of tensors to hold the same names and the same bits.
void ExpectSameBits(const nn::TensorMap& actual, const nn::TensorMap& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, want] : expected) {
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << what << ": missing " << name;
    const Tensor a = it->second.To(Device::CPU()), e = want.To(Device::CPU());
    ASSERT_EQ(a.shape(), e.shape()) << what << ": " << name;
    ASSERT_EQ(a.dtype(), e.dtype()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(a.data_ptr(), e.data_ptr(), a.nbytes()), 0) << what << ": " << name << " differs";
  }
}

// Expects the bfloat16 compute copies of two models to hold the same bits.
void ExpectSameComputeCopies(const nn::Module& actual, const nn::Module& expected, const std::string& what) {
  const auto a = actual.ComputeCopies(), e = expected.ComputeCopies();
  ASSERT_EQ(a.size(), e.size()) << what;
  nn::TensorMap am, em;
  for (size_t i = 0; i < a.size(); ++i) {
    am[a[i].first.name()] = a[i].second;
    em[e[i].first.name()] = e[i].second;
  }
  ExpectSameBits(am, em, absl::StrCat("compute copies ", what));
}

// Plain DDP (all_reduce, one optimizer over the whole model) and ZeRO-1 side by side on the same group,
// from the same start (ranks perturbed: both broadcast rank 0's weights), fed the same batches. Under bf16
// the layers compute with bfloat16 copies that both optimizers write.
void TrainBothAndCompare(const RankContext& ctx, Opt kind, nn::Precision precision = nn::Precision::kFloat32) {
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
  auto zero = DistributedDataParallel::Create(*zero_model, pg, ZeroBuckets(*pg));
  ASSERT_TRUE(zero.ok()) << zero.status();
  std::unique_ptr<nn::Optimizer> plain_opt = Factory(kind)(plain_model->Parameters());
  plain_opt->SetComputeCopies(plain_model->ComputeCopies());  // none under fp32
  absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> sharded =
      ZeroRedundancyOptimizer::Attach(**zero, Factory(kind));
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  if (precision == nn::Precision::kBFloat16) {  // the all-gathers carry 2 bytes an element
    EXPECT_NE((*sharded)->ShardTable().find("all_gather returns the bfloat16 compute copies"), std::string::npos)
        << (*sharded)->ShardTable();
  }

  // The layout really is uneven: some bucket does not divide into equal blocks, so padding is involved.
  bool padded = false;
  for (int b = 0; b < (*zero)->reducer().num_buckets(); ++b) {
    padded = padded || (*zero)->reducer().BucketBuffer(b).numel() != (*zero)->reducer().grad_bucket(b).numel;
    EXPECT_STREQ((*zero)->BucketPath(b), "Gloo reduce_scatter");
  }
  EXPECT_TRUE(padded);

  for (int step = 0; step < kSteps; ++step) {
    const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(), 300 + step);
    const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
    plain_opt->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(mine.x)), mine.labels));
    plain_opt->Step();

    zero_model->ZeroGrad(/*set_to_none=*/step % 2 == 0);  // both ways of clearing must work
    autograd::Backward(autograd::CrossEntropy((*zero)->Forward(Variable(mine.x)), mine.labels));  // steps inside

    const std::string when = absl::StrCat("after ", Name(kind), " step ", step + 1, " on ", ctx.world_size,
                                          " ranks, ", nn::PrecisionName(precision));
    ExpectSameComputeCopies(*zero_model, *plain_model, when);  // what the next forward computes with
    // (Under bf16 the float32 parameters are current in this rank's blocks only, until consolidated.)
    absl::StatusOr<nn::TensorMap> state = (*sharded)->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok()) << state.status();
    ExpectSameBits(*state, plain_opt->StateTensors(), absl::StrCat("optimizer state ", when));
    ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, when);
    ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
  }
  EXPECT_TRUE((*zero)->reducer().buckets_rebuilt());  // the re-sharding after step 1 was part of the run
}

class ZeroOne : public ::testing::TestWithParam<int> {};

TEST_P(ZeroOne, TrainsToTheSameBitsAsPlainDdpAndItsStateIsPlainDdpsState) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) TrainBothAndCompare(ctx, kind);
  });
}

TEST_P(ZeroOne, UnderBf16ItGathersTheComputeCopiesAndStillMatchesPlainDdpBitForBit) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) TrainBothAndCompare(ctx, kind, nn::Precision::kBFloat16);
  });
}

TEST_P(ZeroOne, EachRankHoldsCeilPOverNPlusPaddingOfOptimizerStateAndMasterWeights) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      auto model = nn::MLP(kDims, nn::MlpOptions{});
      auto ddp = DistributedDataParallel::Create(*model, pg, ZeroBuckets(*pg));
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      auto sharded = ZeroRedundancyOptimizer::Attach(**ddp, Factory(kind));
      ASSERT_TRUE(sharded.ok()) << sharded.status();
      const Batch batch = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), 11 + ctx.rank);
      for (int step = 0; step < 2; ++step) {  // past the rebuild, with the state allocated
        model->ZeroGrad();
        autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(batch.x)), batch.labels));
      }
      const zero::ShardMemory m = (*sharded)->Memory();
      const int64_t p = model->NumParameters(), world = ctx.world_size;
      int64_t blocks = 0;  // one block of each bucket, as shard_layout.h sizes them
      for (int b = 0; b < (*ddp)->reducer().num_buckets(); ++b) {
        blocks += zero::ShardNumel((*ddp)->reducer().grad_bucket(b).numel, ctx.world_size, 4,
                                   zero::BlockSize::kGlooChunks);
      }
      const int64_t state_per_element = kind == Opt::kSgdMomentum ? 4 : 8;  // momentum; exp_avg + exp_avg_sq
      EXPECT_EQ(m.parameters, p);
      EXPECT_EQ(m.shard_elements, blocks);
      EXPECT_GE(m.shard_elements, (p + world - 1) / world);
      EXPECT_LT(m.shard_elements - (p + world - 1) / world, 2 * (*ddp)->reducer().num_buckets());
      EXPECT_EQ(m.padding_elements, world * blocks - p);
      EXPECT_EQ(m.optimizer_state_bytes, state_per_element * blocks);
      EXPECT_EQ(m.master_weight_bytes, 4 * blocks);
      // Plain DDP's optimizer holds all P elements of state on every rank.
      std::unique_ptr<nn::Optimizer> plain = Factory(kind)(model->Parameters());
      plain->Step();  // allocates its state (the gradients are defined)
      int64_t plain_bytes = 0;
      for (const auto& [name, t] : plain->StateTensors()) plain_bytes += t.dim() > 0 ? t.nbytes() : 0;
      EXPECT_EQ(plain_bytes, state_per_element * p);
      EXPECT_EQ(m.unsharded_optimizer_state_bytes, plain_bytes);
    }
  });
}

TEST_P(ZeroOne, GlooReduceScatterThenAllGatherOverItsBlocksEqualsGlooAllReduceBitForBit) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    // Small buckets (2 segments per rank), and past 2 * world MiB (Gloo's 1 MiB segments, several per rank).
    for (int64_t numel : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{65537},
                          (int64_t{21} << 20) / 8 + 3 /* 2.6 M floats, 10.5 MiB */}) {
      Tensor values = Tensor::Empty({numel}, DType::kFloat32, Device::CPU());
      ops::NormalInit(values, 0.0, 1.0, /*seed=*/99 + ctx.rank);  // a different vector on each rank
      Tensor summed = values.Clone();
      ASSERT_TRUE(pg->AllReduce(summed, ReduceOp::kAvg)->Wait().ok());

      const int64_t shard = zero::ShardNumel(numel, ctx.world_size, 4, zero::BlockSize::kGlooChunks);
      Tensor padded = Tensor::Zeros({ctx.world_size * shard}, DType::kFloat32, Device::CPU());
      Tensor head = padded.Rows(0, numel);
      ops::CopyInto(head, values);
      Tensor mine = padded.Rows(ctx.rank * shard, (ctx.rank + 1) * shard);
      ASSERT_TRUE(pg->ReduceScatter(mine, padded, ReduceOp::kAvg)->Wait().ok());  // in place
      ASSERT_TRUE(pg->AllGather(padded, mine)->Wait().ok());                      // in place
      EXPECT_EQ(std::memcmp(padded.data_ptr(), summed.data_ptr(), summed.nbytes()), 0)
          << numel << " elements on " << ctx.world_size << " ranks: the sums were added in another order";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroOne, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

TEST(ZeroOne, GradientAccumulationUnderNoSyncMatchesPlainDdp) {
  // Two micro-batches per step: the first under NoSync (local accumulation, no collective, no step), the
  // second synchronised (one reduce-scatter of the sums, one step).
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 21;
    auto plain_model = nn::MLP(kDims, mo);
    auto zero_model = nn::MLP(kDims, mo);
    auto plain = DistributedDataParallel::Create(*plain_model, pg, SmallBuckets());
    auto zero = DistributedDataParallel::Create(*zero_model, pg, ZeroBuckets(*pg));
    ASSERT_TRUE(plain.ok() && zero.ok());
    std::unique_ptr<nn::Optimizer> plain_opt = Factory(Opt::kSgdMomentum)(plain_model->Parameters());
    auto sharded = ZeroRedundancyOptimizer::Attach(**zero, Factory(Opt::kSgdMomentum));
    ASSERT_TRUE(sharded.ok()) << sharded.status();
    for (int step = 0; step < 3; ++step) {
      plain_opt->ZeroGrad();
      zero_model->ZeroGrad();
      for (int micro = 0; micro < 2; ++micro) {
        const uint64_t seed = 70 + 10 * step + micro + 100 * ctx.rank;
        const Batch b = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), seed);
        for (DistributedDataParallel* ddp : {plain->get(), zero->get()}) {
          if (micro == 0) {
            auto guard = ddp->NoSync();
            autograd::Backward(autograd::CrossEntropy(ddp->Forward(Variable(b.x)), b.labels));
          } else {
            autograd::Backward(autograd::CrossEntropy(ddp->Forward(Variable(b.x)), b.labels));
          }
        }
      }
      plain_opt->Step();
      const std::string when = absl::StrCat("after accumulated step ", step + 1);
      ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, when);
      ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
    }
  });
}

TEST(ZeroOne, AlignedBlocksTrainToTheSameBitsOnTwoRanks) {
  // NCCL's block size (16-element aligned, more padding), run here on Gloo by giving the hook that block
  // size. On 2 ranks every sum is a + b, so any block size must give plain DDP's bits.
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      nn::MlpOptions mo;
      mo.seed = 9;
      auto plain_model = nn::MLP(kDims, mo);
      auto zero_model = nn::MLP(kDims, mo);
      auto plain = DistributedDataParallel::Create(*plain_model, pg, SmallBuckets());
      ASSERT_TRUE(plain.ok());
      DdpOptions aligned = SmallBuckets();
      aligned.comm_hook = zero::ReduceScatterHook(*pg, zero::BlockSize::kAligned);
      auto zero = DistributedDataParallel::Create(*zero_model, pg, aligned);
      ASSERT_TRUE(zero.ok()) << zero.status();
      auto attached = ZeroRedundancyOptimizer::Attach(**zero, Factory(kind));
      ASSERT_TRUE(attached.ok()) << attached.status();
      ZeroRedundancyOptimizer& sharded = **attached;
      std::unique_ptr<nn::Optimizer> plain_opt = Factory(kind)(plain_model->Parameters());
      for (int step = 0; step < 4; ++step) {
        const Batch b = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), 900 + step + 10 * ctx.rank);
        plain_opt->ZeroGrad();
        autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(b.x)), b.labels));
        plain_opt->Step();
        zero_model->ZeroGrad();
        autograd::Backward(autograd::CrossEntropy((*zero)->Forward(Variable(b.x)), b.labels));
        ASSERT_TRUE(sharded.status().ok()) << sharded.status();
        const std::string when = absl::StrCat(Name(kind), " step ", step + 1, " with aligned blocks");
        ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, when);
      }
      EXPECT_EQ(sharded.Memory().shard_elements % 16, 0);
      absl::StatusOr<nn::TensorMap> state = sharded.ConsolidatedStateTensors();
      ASSERT_TRUE(state.ok()) << state.status();
      ExpectSameBits(*state, plain_opt->StateTensors(), absl::StrCat(Name(kind), " state with aligned blocks"));
    }
  });
}

TEST(ZeroOne, RefusesOptionsItCannotHonourAndSaysWhich) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = nn::MLP(kDims, nn::MlpOptions{});
    auto refusal = [&](const DdpOptions& options, bool fused) {
      auto ddp = DistributedDataParallel::Create(*model, pg, options);
      EXPECT_TRUE(ddp.ok()) << ddp.status();
      if (!ddp.ok()) return absl::Status(ddp.status());
      std::unique_ptr<FusedOptimizer> other;  // another optimizer wrapper already attached
      if (fused) other = FusedOptimizer::Attach(**ddp, Factory(Opt::kSgdMomentum)).value();
      auto attached = ZeroRedundancyOptimizer::Attach(**ddp, Factory(Opt::kSgdMomentum));
      return attached.status();
    };
    DdpOptions coalesced = ZeroBuckets(*pg);
    coalesced.gradient_as_bucket_view = false;
    const absl::Status a = refusal(coalesced, false);
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.message().find("gradient_as_bucket_view"), std::string::npos) << a;
    const absl::Status b = refusal(SmallBuckets(), false);  // plain DDP: all-reduced, unpadded buckets
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.message().find("zero::ReduceScatterHook(pg)"), std::string::npos) << b;
    DdpOptions unused = ZeroBuckets(*pg);
    unused.find_unused_parameters = true;
    const absl::Status c = refusal(unused, false);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.message().find("find_unused_parameters"), std::string::npos) << c;
    const absl::Status d = refusal(ZeroBuckets(*pg), /*fused=*/true);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.message().find("a fused optimizer"), std::string::npos) << d;
  });
}

}  // namespace
}  // namespace tinyddp::dist
