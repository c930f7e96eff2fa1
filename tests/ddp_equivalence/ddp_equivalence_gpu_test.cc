// DDP on GPUs with NCCL, one process per GPU: the same claim as ddp_equivalence_test (N ranks == one
// process on the concatenated batch, bit-identical ranks after every step) for both gradient layouts and
// both optimizers, plus what the GPU path adds: the trained step allocates no device memory once warm, and
// the bf16 hook stays identical across ranks, and the copy-engine hook (dist/accel/copy_engine). Needs at
// least 2 GPUs; skips otherwise.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/accel/copy_engine/copy_engine_hook.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/ddp/bf16_compress_hook.h"
#include "dist/ddp/ddp.h"
#include "dist/testing/ddp_testing.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/ddp/reducer.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/nccl_testing.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
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

#define SKIP_WITHOUT_TWO_GPUS() \
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << cuda::DeviceCount()

// This rank's NCCL group on GPU `rank`, with a compute stream of its own (as ddp_step_bench runs).
const std::vector<int64_t> kDims = {67, 129, 95, 10};
constexpr int64_t kPerRankBatch = 24;

// Every run goes through CopyEngineHook, as ddp_mlp opts in on two GPUs. copy_engines: every float32 bucket
// goes through the copy-engine all_reduce (its size threshold set to 0); otherwise it takes only buckets of
// 4 MiB and more, so these small buckets all take NCCL's all_reduce.
void TrainAndCompare(const RankContext& ctx, bool bucket_view, bool adamw, bool fused = false,
                     bool copy_engines = false) {
  auto pg = testing::ConnectNccl(ctx);
  ASSERT_NE(pg, nullptr);
  const Device device = Device::CUDA(ctx.rank);
  nn::MlpOptions mo;
  mo.seed = 42;
  mo.device = device;
  auto model = nn::MLP(kDims, mo);
  auto reference = nn::MLP(kDims, mo);
  if (ctx.rank != 0) ddp_testing::PerturbParameters(*model, ctx.rank);
  DdpOptions options;
  options.first_bucket_bytes = 4096;
  options.bucket_cap_bytes = 40000;
  options.gradient_as_bucket_view = bucket_view;
  if (copy_engines) setenv("TINYDDP_COPY_ENGINE_MIN_BYTES", "0", 1);
  absl::StatusOr<std::shared_ptr<CopyEngineHook>> made = CopyEngineHook::Create(*pg);
  if (copy_engines) unsetenv("TINYDDP_COPY_ENGINE_MIN_BYTES");
  ASSERT_TRUE(made.ok()) << made.status();
  const std::shared_ptr<CopyEngineHook> hook = *made;
  options.comm_hook = hook->AsCommHook();
  auto ddp = DistributedDataParallel::Create(*model, pg, options);
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  ASSERT_GE((*ddp)->reducer().num_buckets(), 3);
  const char* want_path = copy_engines ? "copy engines" : "NCCL all_reduce";
  for (int b = 0; b < (*ddp)->reducer().num_buckets(); ++b) {
    EXPECT_STREQ((*ddp)->BucketPath(b), want_path) << "bucket " << b << "\n" << (*ddp)->BucketTable();
  }

  std::unique_ptr<nn::Optimizer> opt, ref_opt;
  if (adamw) {
    opt = std::make_unique<nn::AdamW>(model->Parameters());
    ref_opt = std::make_unique<nn::AdamW>(reference->Parameters());
  } else {
    nn::SgdOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    opt = std::make_unique<nn::SGD>(model->Parameters(), so);
    ref_opt = std::make_unique<nn::SGD>(reference->Parameters(), so);
  }
  std::unique_ptr<FusedOptimizer> fused_optimizer;
  if (fused) {
    // One optimizer per bucket, stepped inside Backward (the benchmark's default); `opt` is then only
    // used to clear gradients.
    nn::SgdOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    fused_optimizer = FusedOptimizer::Attach(**ddp, [so](std::vector<Variable> params) {
                        return std::make_unique<nn::SGD>(std::move(params), so);
                      }).value();
  }
  cuda::AllocatorStats warm;
  std::string mallocs;  // cudaMalloc count after each step, for the message below
  for (int step = 0; step < 6; ++step) {
    if (step == 3) warm = cuda::GetAllocatorStats(ctx.rank);
    if (step > 0) absl::StrAppend(&mallocs, " ", cuda::GetAllocatorStats(ctx.rank).num_cuda_malloc);
    const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(), 7 + step,
                                             device);
    const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
    opt->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(mine.x)), mine.labels));
    if (!fused) opt->Step();
    ref_opt->ZeroGrad();
    autograd::Backward(autograd::CrossEntropy(reference->Forward(Variable(all.x)), all.labels));
    ref_opt->Step();
    const std::string when = absl::StrCat("after step ", step + 1, adamw ? " (AdamW)" : " (SGD momentum)",
                                          bucket_view ? ", bucket views" : ", coalesced", fused ? ", fused" : "");
    ddp_testing::ExpectParametersNear(*model, *reference, 1e-5, 1e-4, when);
    ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *model, when);
  }
  // Steps 4-6 (with the batches made and compared) called cudaMalloc no more: the caching allocator,
  // the preallocated buckets and NCCL's pooled events serve every step.
  EXPECT_EQ(cuda::GetAllocatorStats(ctx.rank).num_cuda_malloc, warm.num_cuda_malloc)
      << "cudaMalloc calls after steps 1..5:" << mallocs;
  if (copy_engines) {
    ASSERT_TRUE(hook->on()) << hook->off_reason();
    // Every bucket of every step, at least.
    EXPECT_GE(hook->calls(), 6 * (*ddp)->reducer().num_buckets());
    // Bucket views are registered (also again after the rebuild): each went straight into the peer's.
    if (bucket_view) {
      EXPECT_EQ(hook->direct_calls(), hook->calls());
    }
  } else {
    EXPECT_EQ(hook->calls(), 0) << "these buckets are below the copy engines' threshold";
  }
}

TEST(DdpOnGpus, MatchesOneProcessOnTheConcatenatedBatchWithBucketViews) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(cuda::DeviceCount(), [](const RankContext& ctx) {
    TrainAndCompare(ctx, /*bucket_view=*/true, /*adamw=*/false);
    TrainAndCompare(ctx, /*bucket_view=*/true, /*adamw=*/true);
  });
}

TEST(DdpOnGpus, MatchesOneProcessOnTheConcatenatedBatchWithCoalescedGradients) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(cuda::DeviceCount(), [](const RankContext& ctx) {
    TrainAndCompare(ctx, /*bucket_view=*/false, /*adamw=*/false);
    TrainAndCompare(ctx, /*bucket_view=*/false, /*adamw=*/true);
  });
}

TEST(DdpOnGpus, FusedOptimizerMatchesOneProcessOnTheConcatenatedBatch) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(cuda::DeviceCount(), [](const RankContext& ctx) {
    TrainAndCompare(ctx, /*bucket_view=*/false, /*adamw=*/false, /*fused=*/true);
  });
}

TEST(DdpOnGpus, MatchesOneProcessWhenEveryBucketGoesThroughTheCopyEngines) {
  SKIP_WITHOUT_TWO_GPUS();
  if (cuda::DeviceCount() != 2) GTEST_SKIP() << "the copy-engine all_reduce is for exactly two GPUs";
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainAndCompare(ctx, /*bucket_view=*/true, /*adamw=*/false, /*fused=*/false, /*copy_engines=*/true);
    TrainAndCompare(ctx, /*bucket_view=*/false, /*adamw=*/true, /*fused=*/false, /*copy_engines=*/true);
    TrainAndCompare(ctx, /*bucket_view=*/false, /*adamw=*/false, /*fused=*/true, /*copy_engines=*/true);
  });
}

TEST(DdpOnGpus, Bf16HookGradientsAreIdenticalOnEveryRankAndCloseToFp32) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(cuda::DeviceCount(), [](const RankContext& ctx) {
    auto pg = testing::ConnectNccl(ctx);
    ASSERT_NE(pg, nullptr);
    const Device device = Device::CUDA(ctx.rank);
    nn::MlpOptions mo;
    mo.seed = 3;
    mo.device = device;
    auto model = nn::MLP(kDims, mo);
    auto fp32_model = nn::MLP(kDims, mo);
    DdpOptions options;
    options.comm_hook = Bf16CompressHook();
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    auto fp32 = DistributedDataParallel::Create(*fp32_model, pg);
    ASSERT_TRUE(ddp.ok() && fp32.ok());
    const Batch mine = ddp_testing::MakeBatch(kPerRankBatch, kDims.front(), kDims.back(), 100 + ctx.rank, device);
    autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(mine.x)), mine.labels));
    autograd::Backward(autograd::CrossEntropy((*fp32)->Forward(Variable(mine.x)), mine.labels));
    const auto a = model->NamedParameters(), b = fp32_model->NamedParameters();
    for (size_t i = 0; i < a.size(); ++i) {
      const Tensor grad = a[i].second.grad();
      Tensor all = Tensor::Empty({grad.numel() * ctx.world_size}, DType::kFloat32, device);
      ASSERT_TRUE(pg->AllGather(all, grad.Flatten())->Wait().ok());
      const std::vector<float> mine_v = grad.ToVector<float>();
      for (int r = 0; r < ctx.world_size; ++r) {
        EXPECT_EQ(all.Rows(r * grad.numel(), (r + 1) * grad.numel()).ToVector<float>(), mine_v)
            << a[i].first << " differs on rank " << r;
      }
      ddp_testing::ExpectTensorNear(grad, b[i].second.grad(), 2e-3, 2e-2, absl::StrCat("bf16 grad of ", a[i].first));
    }
  });
}

}  // namespace
}  // namespace tinyddp::dist
