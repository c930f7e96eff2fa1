// bf16 mixed precision under DistributedDataParallel, on real processes over Gloo. The claims: DDP's
// broadcast of rank 0's weights also refreshes every rank's bfloat16 compute copies (the ranks start
// from different weights here); the buckets hold float32 gradients of the float32 masters; with the
// training loop's optimizer and with DDP's fused per-bucket optimizers, every compute copy is its master
// rounded to bfloat16 after every step, the masters stay bit-identical across ranks, and N ranks follow
// one bf16 process on the concatenated batch to within bfloat16 rounding.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/reducer.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;

const std::vector<int64_t> kDims = {13, 17, 11, 5};  // 3 layers, odd sizes
constexpr int64_t kPerRankBatch = 3;
constexpr int kSteps = 4;
const nn::SgdOptions kSgd = {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3};

std::shared_ptr<nn::Sequential> Bf16Mlp() {
  nn::MlpOptions options;
  options.seed = 42;
  options.precision = nn::Precision::kBFloat16;
  return nn::MLP(kDims, options);
}

void ExpectCopiesAreTheRoundedMasters(const nn::Module& model, const std::string& when) {
  const auto copies = model.ComputeCopies();
  ASSERT_EQ(copies.size(), model.Parameters().size()) << when;
  for (const auto& [param, copy] : copies) {
    const std::vector<float> master = param.data().ToVector<float>();
    const std::vector<BFloat16> bits = copy.ToVector<BFloat16>();
    for (size_t i = 0; i < master.size(); ++i) {
      ASSERT_EQ(bits[i].bits, BFloat16(master[i]).bits) << when << ", " << param.name() << " element " << i;
    }
  }
}

class DdpBf16 : public ::testing::TestWithParam<bool> {};  // fused per-bucket optimizers or not

TEST_P(DdpBf16, RanksRefreshCopiesAfterTheBroadcastStayBitIdenticalAndFollowOneProcess) {
  const bool fused = GetParam();
  RunOnRanks(2, [fused](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = Bf16Mlp();
    auto reference = Bf16Mlp();  // one process, fed both ranks' samples
    if (ctx.rank != 0) {
      ddp_testing::PerturbParameters(*model, ctx.rank);
      model->RefreshComputeCopies();  // a rank that starts elsewhere: its copies follow its own weights
    }
    DdpOptions options;
    options.first_bucket_bytes = 256;  // several buckets
    options.bucket_cap_bytes = 700;
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ASSERT_GE((*ddp)->reducer().num_buckets(), 2);
    ExpectCopiesAreTheRoundedMasters(*model, "after the broadcast from rank 0");
    ddp_testing::ExpectParametersNear(*model, *reference, 0, 0, "after the broadcast from rank 0");

    nn::SGD sgd(model->Parameters(), kSgd);
    sgd.SetComputeCopies(model->ComputeCopies());
    std::unique_ptr<FusedOptimizer> fused_optimizer;
    if (fused) {
      fused_optimizer = FusedOptimizer::Attach(**ddp, [&model](std::vector<Variable> params) {
                          auto opt = std::make_unique<nn::SGD>(std::move(params), kSgd);
                          opt->SetComputeCopies(model->ComputeCopies());
                          return opt;
                        }).value();
    }
    nn::SGD ref_sgd(reference->Parameters(), kSgd);
    ref_sgd.SetComputeCopies(reference->ComputeCopies());
    for (int step = 0; step < kSteps; ++step) {
      const Batch all = ddp_testing::MakeBatch(2 * kPerRankBatch, kDims.front(), kDims.back(), 100 + step);
      const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
      model->ZeroGrad();
      autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(mine.x)), mine.labels));
      for (const Variable& p : model->Parameters()) {
        ASSERT_EQ(p.grad().dtype(), DType::kFloat32) << p.name() << ": float32 gradients in float32 buckets";
      }
      if (!fused) sgd.Step();  // fused: the per-bucket optimizers stepped inside Backward

      ref_sgd.ZeroGrad();
      autograd::Backward(autograd::CrossEntropy(reference->Forward(Variable(all.x)), all.labels));
      ref_sgd.Step();

      const std::string when = absl::StrCat("after step ", step + 1, fused ? " (fused optimizers)" : "");
      ExpectCopiesAreTheRoundedMasters(*model, when);
      ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *model, when);
      // The ranks' bfloat16 activations are the single process's, but dW sums its rows in another
      // grouping (per rank, then the average), so the masters agree to float32 rounding of bf16 products.
      ddp_testing::ExpectParametersNear(*model, *reference, 1e-5, 1e-3, when);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Optimizer, DdpBf16, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "FusedPerBucket" : "TrainingLoop";
                         });

}  // namespace
}  // namespace tinyddp::dist
