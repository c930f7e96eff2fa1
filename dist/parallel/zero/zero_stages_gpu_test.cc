// ZeRO-2 and ZeRO-3 on GPUs over NCCL, against plain DDP on the same group and the same batches (tag gpu;
// skipped without a GPU):
//   * a one-rank group and, when present, two GPUs (two ranks add in one order only): the same bits as
//     plain DDP, with SGD (momentum) and AdamW; ZeRO-2 and ZeRO-3 also under bf16 (ZeRO-3's all-gathers then
//     move the bfloat16 copies: NCCL's bf16 path, and the compute copies the next forward reads are DDP's);
//   * ZeRO-2 leaves no gradient on the parameters; ZeRO-3 holds at most two layers whole.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "dist/parallel/zero/gradient_shards.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/parallel/zero/zero_testing.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/nccl_testing.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/precision.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using zero_testing::Opt;

const std::vector<int64_t> kDims = {67, 129, 95, 10};
constexpr int64_t kPerRankBatch = 24;

zero::OptimizerFactory Factory(Opt kind) {
  return [kind](std::vector<Variable> params) { return zero_testing::MakeOptimizer(kind, std::move(params)); };
}

nn::TensorMap Parameters(const nn::Module& model) {
  nn::TensorMap map;
  for (const auto& [name, p] : model.NamedParameters()) map[name] = p.data();
  return map;
}

// bf16: the compute copies by parameter name (after GatherFullParameters under ZeRO-3); empty under fp32.
nn::TensorMap ComputeCopies(const nn::Module& model) {
  nn::TensorMap map;
  for (const auto& [p, copy] : model.ComputeCopies()) map[p.name()] = copy;
  return map;
}

// `stage` 2 or 3 beside plain DDP, 5 steps, compared after each.
void TrainBothAndCompare(const RankContext& ctx, int stage, Opt kind, nn::Precision precision,
                         bool in_backward = false) {
  auto pg = testing::ConnectNccl(ctx);
  ASSERT_NE(pg, nullptr);
  const Device device = Device::CUDA(ctx.rank);
  nn::MlpOptions mo;
  mo.seed = 5;
  mo.device = device;
  mo.precision = precision;
  auto plain_model = nn::MLP(kDims, mo);
  auto zero_model = nn::MLP(kDims, mo);
  DdpOptions options;
  options.first_bucket_bytes = 4096;  // several buckets
  options.bucket_cap_bytes = 40000;
  auto plain = DistributedDataParallel::Create(*plain_model, pg, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::unique_ptr<nn::Optimizer> plain_opt = zero_testing::MakeOptimizer(kind, plain_model->Parameters());
  plain_opt->SetComputeCopies(plain_model->ComputeCopies());

  std::unique_ptr<DistributedDataParallel> ddp;  // ZeRO-2
  std::unique_ptr<zero::ZeroRedundancyOptimizer> sharded;
  std::unique_ptr<zero::FullyShardedDataParallel> fsdp;  // ZeRO-3
  if (stage == 2) {
    std::shared_ptr<zero::GradientShards> shards = zero::GradientShards::Create(*pg);
    options.gradient_as_bucket_view = false;
    options.comm_hook = shards->Hook();
    auto made = DistributedDataParallel::Create(*zero_model, pg, options);
    ASSERT_TRUE(made.ok()) << made.status();
    ddp = std::move(*made);
    auto attached = zero::ZeroRedundancyOptimizer::Attach(*ddp, Factory(kind), shards, {.in_backward = in_backward});
    ASSERT_TRUE(attached.ok()) << attached.status();
    sharded = std::move(*attached);
    EXPECT_STREQ(ddp->BucketPath(0), "NCCL reduce_scatter to shards");
  } else {
    auto made = zero::FullyShardedDataParallel::Create(zero_model, pg, Factory(kind));
    ASSERT_TRUE(made.ok()) << made.status();
    fsdp = std::move(*made);
  }
  for (int step = 0; step < 5; ++step) {
    const Batch all =
        ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(), 40 + step, device);
    const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
    plain_opt->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(mine.x)), mine.labels));
    plain_opt->Step();
    zero_model->ZeroGrad();
    const Variable logits = ddp ? ddp->Forward(Variable(mine.x)) : fsdp->Forward(Variable(mine.x));
    autograd::Backward(autograd::CrossEntropy(logits, mine.labels));
    ASSERT_TRUE(ddp ? ddp->status().ok() : fsdp->status().ok());
    if (in_backward) EXPECT_GE(ddp->reducer().buckets_finished_in_backward(), 1) << "step " << step + 1;
    const std::string when = absl::StrCat("ZeRO-", stage, " after step ", step + 1, " (", zero_testing::Name(kind),
                                          ") on ", ctx.world_size, " GPU(s), ", nn::PrecisionName(precision),
                                          in_backward ? ", stepped inside backward" : "");
    absl::StatusOr<nn::TensorMap> state = sharded ? sharded->ConsolidatedStateTensors() : fsdp->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok()) << state.status();
    zero_testing::ExpectSameBits(*state, plain_opt->StateTensors(), "state " + when);
    if (fsdp) {
      ASSERT_TRUE(fsdp->GatherFullParameters().ok());
    }
    zero_testing::ExpectSameBits(Parameters(*zero_model), Parameters(*plain_model), when);
    if (fsdp) {
      zero_testing::ExpectSameBits(ComputeCopies(*zero_model), ComputeCopies(*plain_model), "copies " + when);
      fsdp->ReleaseFullParameters();
    }
    if (ddp) {
      for (const auto& [name, p] : zero_model->NamedParameters()) EXPECT_FALSE(p.grad().defined()) << name << when;
    }
  }
  if (fsdp) {
    const zero::FullyShardedMemory m = fsdp->Memory();
    EXPECT_LE(m.peak_gathered_bytes, 2 * m.largest_unit_bytes) << m.ToString();
    if (precision == nn::Precision::kBFloat16) {
      EXPECT_EQ(m.compute_copy_bytes, 2 * m.shard_elements) << m.ToString();
      EXPECT_EQ(2 * m.largest_unit_bytes, m.largest_gradient_bytes) << "the gathers move bfloat16: " << m.ToString();
    }
    // Evaluation through it, without a graph: under bf16 the GEMMs read the gathered bfloat16 copies.
    const Batch test = ddp_testing::MakeBatch(8, kDims.front(), kDims.back(), 77, device);
    autograd::NoGradGuard no_grad;
    const Tensor got = fsdp->Forward(Variable(test.x)).data(), want = plain_model->Forward(Variable(test.x)).data();
    zero_testing::ExpectSameBits({{"logits", got}}, {{"logits", want}}, "evaluation, ZeRO-3, " +
                                 std::string(nn::PrecisionName(precision)));
  }
}

void AllStages(const RankContext& ctx) {
  for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
    TrainBothAndCompare(ctx, 2, kind, nn::Precision::kFloat32);
    TrainBothAndCompare(ctx, 3, kind, nn::Precision::kFloat32);
  }
  TrainBothAndCompare(ctx, 2, Opt::kAdamW, nn::Precision::kBFloat16);
  // ZeRO-2 with the optimizer inside backward: each block stepped on the reducer's side stream.
  for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
    TrainBothAndCompare(ctx, 2, kind, nn::Precision::kFloat32, /*in_backward=*/true);
  }
  TrainBothAndCompare(ctx, 2, Opt::kAdamW, nn::Precision::kBFloat16, /*in_backward=*/true);
  for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) TrainBothAndCompare(ctx, 3, kind, nn::Precision::kBFloat16);
}

TEST(ZeroStagesOnGpu, OneRankNcclGroupTrainsToTheSameBitsAsPlainDdp) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  RunOnRanks(1, AllStages);
}

TEST(ZeroStagesOnGpu, TwoGpusTrainToTheSameBitsAsPlainDdp) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << cuda::DeviceCount();
  RunOnRanks(2, AllStages);
}

}  // namespace
}  // namespace tinyddp::dist
