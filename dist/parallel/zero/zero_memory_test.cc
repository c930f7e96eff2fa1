// What a rank holds under ZeRO-1/2 against plain DDP, measured by the host allocator (tensor/storage.h) on
// real Gloo processes at 1, 2 and 4 ranks: every tensor alive after a few steps (parameters and their bf16
// compute copies, gradient buckets or blocks, optimizer state, ZeRO's flat buffers), with and without the
// optimizer inside backward. A sharded optimizer must never hold more than DDP, at any rank count; at one
// rank it holds the same. The most alive at once during the run is printed beside it.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/gradient_shards.h"
#include "dist/parallel/zero/memory_table.h"
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
using zero_testing::Opt;

// Buckets of a few layers each, so that the one-time rebuild moves parameters between buckets and ZeRO
// re-shards; odd sizes, so that blocks need padding.
const std::vector<int64_t> kDims = {61, 97, 83, 45, 7};
constexpr int64_t kBatch = 4;
constexpr int kSteps = 3;

DdpOptions Buckets() {
  DdpOptions o;
  o.first_bucket_bytes = 2000;
  o.bucket_cap_bytes = 24000;
  return o;
}

enum class Mode { kDdp, kZero1, kZero2 };
const char* Name(Mode m) { return m == Mode::kDdp ? "DDP" : m == Mode::kZero1 ? "ZeRO-1" : "ZeRO-2"; }

struct Measured {
  int64_t held = 0;  // live tensor bytes after the steps, above what was live before the model
  int64_t peak = 0;  // the most live tensor bytes at once during the run, above the same baseline
  zero::RankMemory parts;  // what each piece says it holds (memory_table.h)
};

// One training run of `mode` from nothing: model, DDP, optimizer, kSteps steps; then what is alive.
Measured Run(const RankContext& ctx, const std::shared_ptr<ProcessGroup>& pg, Mode mode, Opt kind,
             nn::Precision precision, bool in_backward) {
  const Batch batch = ddp_testing::MakeBatch(kBatch, kDims.front(), kDims.back(), 5 + ctx.rank);
  const Variable input(batch.x);
  const int64_t baseline = GetHostMemoryStats().live_bytes;
  ResetHostPeak();
  Measured m;
  {
    nn::MlpOptions mo;
    mo.seed = 3;
    mo.precision = precision;
    auto model = nn::MLP(kDims, mo);
    DdpOptions options = Buckets();
    std::shared_ptr<zero::GradientShards> shards;
    if (mode == Mode::kZero1) options.comm_hook = zero::ReduceScatterHook(*pg);
    if (mode == Mode::kZero2) {
      shards = zero::GradientShards::Create(*pg);
      options.comm_hook = shards->Hook();
      options.gradient_as_bucket_view = false;
    }
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    EXPECT_TRUE(ddp.ok()) << ddp.status();
    if (!ddp.ok()) return m;
    std::unique_ptr<nn::Optimizer> plain;
    std::unique_ptr<zero::ZeroRedundancyOptimizer> sharded;
    if (mode == Mode::kDdp) {
      plain = zero_testing::MakeOptimizer(kind, model->Parameters());
      plain->SetComputeCopies(model->ComputeCopies());
    } else {
      auto attached = zero::ZeroRedundancyOptimizer::Attach(
          **ddp, [kind](std::vector<Variable> params) { return zero_testing::MakeOptimizer(kind, std::move(params)); },
          shards, {.in_backward = in_backward});
      EXPECT_TRUE(attached.ok()) << attached.status();
      if (!attached.ok()) return m;
      sharded = *std::move(attached);
    }
    for (int step = 0; step < kSteps; ++step) {
      if (plain) plain->ZeroGrad(/*set_to_none=*/true);
      autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(input), batch.labels));
      EXPECT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      if (plain) plain->Step();
    }
    EXPECT_TRUE((*ddp)->reducer().buckets_rebuilt());
    m.held = GetHostMemoryStats().live_bytes - baseline;
    m.peak = GetHostMemoryStats().peak_bytes - baseline;
    m.parts = plain ? zero::HeldBy(**ddp, *plain) : zero::HeldBy(*sharded);
  }
  return m;
}

void CompareWithDdp(const RankContext& ctx, Opt kind, nn::Precision precision) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  for (bool in_backward : {false, true}) {
    const Measured ddp = Run(ctx, pg, Mode::kDdp, kind, precision, false);
    for (Mode mode : {Mode::kZero1, Mode::kZero2}) {
      const Measured zero = Run(ctx, pg, mode, kind, precision, in_backward);
      const std::string what = absl::StrCat(Name(mode), in_backward ? " (optimizer in backward)" : "", " vs DDP, ",
                                            zero_testing::Name(kind), ", ", nn::PrecisionName(precision), ", rank ",
                                            ctx.rank, " of ", ctx.world_size);
      if (ctx.rank == 0) {
        std::printf("%-60s held %8lld vs %8lld (params %lld vs %lld, grads %lld vs %lld, state %lld vs %lld); "
                    "peak %8lld vs %8lld\n",
                    what.c_str(), static_cast<long long>(zero.held), static_cast<long long>(ddp.held),
                    static_cast<long long>(zero.parts.parameters), static_cast<long long>(ddp.parts.parameters),
                    static_cast<long long>(zero.parts.gradients), static_cast<long long>(ddp.parts.gradients),
                    static_cast<long long>(zero.parts.optimizer_state),
                    static_cast<long long>(ddp.parts.optimizer_state), static_cast<long long>(zero.peak),
                    static_cast<long long>(ddp.peak));
      }
      EXPECT_LE(zero.held, ddp.held) << what;
      // (The peak is printed, not bounded: ZeRO's re-sharding after DDP's rebuild moves the parameters into
      // new flat buffers while the old ones live until their last parameter left, docs/zero.md.)
      if (ctx.world_size == 1) EXPECT_EQ(zero.held, ddp.held) << what << ": one rank shards nothing";
    }
  }
}

class ZeroMemory : public ::testing::TestWithParam<int> {};

TEST_P(ZeroMemory, NeverHoldsMoreThanDdpAndAtOneRankHoldsTheSame) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      for (nn::Precision precision : {nn::Precision::kFloat32, nn::Precision::kBFloat16}) {
        CompareWithDdp(ctx, kind, precision);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroMemory, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

}  // namespace
}  // namespace tinyddp::dist
