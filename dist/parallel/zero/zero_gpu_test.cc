// ZeRO-1 on GPUs over NCCL, against plain DDP on the same group and the same batches:
//   * a one-rank group (one GPU): the reduce-scatter and all-gather degenerate to copies in place, and the
//     trained weights and the consolidated optimizer state equal plain DDP's bit for bit (the optimizer
//     kernels round every operation alike, whatever the tensor lists);
//   * two GPUs (skipped with fewer): the same bits (two ranks add in one order only), ranks identical,
//     each rank holding half the optimizer state;
//   * under bf16 the same, with the bfloat16 compute copies gathered (and compared after every step);
//   * once warm, a ZeRO-1 step calls cudaMalloc no more;
//   * with the optimizer inside backward (each block stepped on the reducer's side stream as its
//     reduce-scatter lands, the all-gathers at the end of backward) all of the above still holds, and some
//     bucket really is stepped before backward ends.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/reduce_scatter_hook.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/nccl_testing.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
#include "nn/precision.h"
#include "nn/sgd.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;

const std::vector<int64_t> kDims = {67, 129, 95, 10};
constexpr int64_t kPerRankBatch = 24;
constexpr int kSteps = 6;

zero::OptimizerFactory Factory(bool adamw) {
  if (adamw) {
    return [](std::vector<Variable> p) -> std::unique_ptr<nn::Optimizer> { return std::make_unique<nn::AdamW>(p); };
  }
  return [](std::vector<Variable> p) -> std::unique_ptr<nn::Optimizer> {
    nn::SgdOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    so.weight_decay = 1e-3;
    return std::make_unique<nn::SGD>(std::move(p), so);
  };
}

void ExpectSameBits(const nn::TensorMap& actual, const nn::TensorMap& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, want] : expected) {
    ASSERT_EQ(actual.count(name), 1u) << what << ": missing " << name;
    const Tensor a = actual.at(name).To(Device::CPU()), e = want.To(Device::CPU());
    ASSERT_EQ(a.nbytes(), e.nbytes()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(a.data_ptr(), e.data_ptr(), a.nbytes()), 0) << what << ": " << name << " differs";
  }
}

void TrainBothAndCompare(const RankContext& ctx, bool adamw, nn::Precision precision = nn::Precision::kFloat32,
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
  options.comm_hook = zero::ReduceScatterHook(*pg);
  auto zero = DistributedDataParallel::Create(*zero_model, pg, options);
  ASSERT_TRUE(plain.ok() && zero.ok());
  ASSERT_GE((*zero)->reducer().num_buckets(), 3);
  for (int b = 0; b < (*zero)->reducer().num_buckets(); ++b) {
    EXPECT_STREQ((*zero)->BucketPath(b), "NCCL reduce_scatter");
  }
  std::unique_ptr<nn::Optimizer> plain_opt = Factory(adamw)(plain_model->Parameters());
  plain_opt->SetComputeCopies(plain_model->ComputeCopies());  // bf16: the step writes them
  absl::StatusOr<std::unique_ptr<zero::ZeroRedundancyOptimizer>> sharded =
      zero::ZeroRedundancyOptimizer::Attach(**zero, Factory(adamw), nullptr, {.in_backward = in_backward});
  ASSERT_TRUE(sharded.ok()) << sharded.status();

  cuda::AllocatorStats warm;
  for (int step = 0; step < kSteps; ++step) {
    const Batch all =
        ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(), 40 + step, device);
    const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
    plain_opt->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(mine.x)), mine.labels));
    plain_opt->Step();
    if (step == 3) warm = cuda::GetAllocatorStats(ctx.rank);
    zero_model->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy((*zero)->Forward(Variable(mine.x)), mine.labels));
    ASSERT_TRUE((*zero)->status().ok()) << (*zero)->status();
    // A GPU steps a bucket at the next gradient hook after it launched (no host wait): never the last one.
    if (in_backward) EXPECT_GE((*zero)->reducer().buckets_finished_in_backward(), 1) << "step " << step + 1;
    if (step >= 3) {
      EXPECT_EQ(cuda::GetAllocatorStats(ctx.rank).num_cuda_malloc, warm.num_cuda_malloc)
          << "a warm ZeRO-1 step called cudaMalloc (step " << step + 1 << ")";
    }
    const std::string when = absl::StrCat("after step ", step + 1, adamw ? " (AdamW)" : " (SGD momentum)", " on ",
                                          ctx.world_size, " GPU(s), ", nn::PrecisionName(precision),
                                          in_backward ? ", stepped inside backward" : "");
    const auto zc = zero_model->ComputeCopies(), pc = plain_model->ComputeCopies();  // bf16: what forward uses
    ASSERT_EQ(zc.size(), pc.size());
    for (size_t i = 0; i < zc.size(); ++i) {
      const std::string what = absl::StrCat(when, ", compute copy of ", zc[i].first.name());
      ExpectSameBits({{"copy", zc[i].second}}, {{"copy", pc[i].second}}, what);
    }
    if (precision == nn::Precision::kFloat32) {
      ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, when);
      ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
    }
  }
  // Under bf16 this also all-gathers the float32 parameters, current until now in this rank's blocks only.
  absl::StatusOr<nn::TensorMap> state = (*sharded)->ConsolidatedStateTensors();
  ASSERT_TRUE(state.ok()) << state.status();
  ExpectSameBits(*state, plain_opt->StateTensors(), "consolidated optimizer state");
  ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, "after the last step");
  ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, "after the last step");

  const zero::ShardMemory m = (*sharded)->Memory();
  const int64_t per_element = adamw ? 8 : 4;
  EXPECT_EQ(m.unsharded_optimizer_state_bytes, per_element * zero_model->NumParameters());
  EXPECT_EQ(m.optimizer_state_bytes, per_element * m.shard_elements);
  // NCCL's blocks are aligned to 16 elements: less than 16 of padding per bucket and rank.
  EXPECT_LT(m.shard_elements - (zero_model->NumParameters() + ctx.world_size - 1) / ctx.world_size,
            16 * (*zero)->reducer().num_buckets())
      << m.ToString();
  if (ctx.world_size > 1) EXPECT_EQ(m.shard_elements % 16, 0) << m.ToString();  // one rank: no padding at all
}

TEST(ZeroOnGpu, OneRankNcclGroupTrainsToTheSameBitsAsPlainDdp) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  RunOnRanks(1, [](const RankContext& ctx) {
    TrainBothAndCompare(ctx, /*adamw=*/false);
    TrainBothAndCompare(ctx, /*adamw=*/true);
    TrainBothAndCompare(ctx, /*adamw=*/false, nn::Precision::kBFloat16);
    TrainBothAndCompare(ctx, /*adamw=*/true, nn::Precision::kBFloat16);
  });
}

TEST(ZeroOnGpu, StepsEachShardInsideBackwardToPlainDdpsBitsOnOneAndTwoGpus) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  for (int gpus = 1; gpus <= std::min(2, cuda::DeviceCount()); ++gpus) {
    RunOnRanks(gpus, [](const RankContext& ctx) {
      for (bool adamw : {false, true}) {
        for (nn::Precision precision : {nn::Precision::kFloat32, nn::Precision::kBFloat16}) {
          TrainBothAndCompare(ctx, adamw, precision, /*in_backward=*/true);
        }
      }
    });
  }
}

TEST(ZeroOnGpu, TwoGpusTrainToTheSameBitsAsPlainDdpWithHalfTheStateEach) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << cuda::DeviceCount();
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainBothAndCompare(ctx, /*adamw=*/false);
    TrainBothAndCompare(ctx, /*adamw=*/true);
    TrainBothAndCompare(ctx, /*adamw=*/false, nn::Precision::kBFloat16);
    TrainBothAndCompare(ctx, /*adamw=*/true, nn::Precision::kBFloat16);
  });
}

}  // namespace
}  // namespace tinyddp::dist
