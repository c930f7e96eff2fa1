// The claim DDP exists for: N ranks, each training on its own B samples, end with the same parameters
// as one process training on the concatenated N*B samples - after several steps of SGD with momentum and
// of AdamW - and every rank holds bit-identical parameters after every step. Real processes, real Gloo
// over loopback TCP, odd layer sizes, several buckets (small caps), and the ranks start from different
// weights so that DDP's broadcast from rank 0 is part of what is tested.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/testing/ddp_testing.h"
#include "dist/ddp/reducer.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
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

enum class Opt { kSgdMomentum, kAdamW };

std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt kind, const nn::Module& model) {
  if (kind == Opt::kSgdMomentum) {
    nn::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    return std::make_unique<nn::SGD>(model.Parameters(), o);
  }
  nn::AdamWOptions o;
  o.lr = 1e-2;
  return std::make_unique<nn::AdamW>(model.Parameters(), o);
}

struct Case {
  int world;
  bool bucket_view;
};

class DdpEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(DdpEquivalence, NRanksMatchOneProcessOnTheConcatenatedBatchAndStayBitIdentical) {
  const Case c = GetParam();
  RunOnRanks(c.world, [c](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      const std::string name = kind == Opt::kSgdMomentum ? "SGD(momentum=0.9)" : "AdamW";
      nn::MlpOptions mo;
      mo.seed = 42;
      auto model = nn::MLP(kDims, mo);
      auto reference = nn::MLP(kDims, mo);  // the single process, fed all N*B samples
      if (ctx.rank != 0) ddp_testing::PerturbParameters(*model, ctx.rank);

      DdpOptions options;
      options.first_bucket_bytes = 256;  // 3 layers' gradients split over several buckets
      options.bucket_cap_bytes = 700;
      options.gradient_as_bucket_view = c.bucket_view;
      auto ddp = DistributedDataParallel::Create(*model, pg, options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      ASSERT_GE((*ddp)->reducer().num_buckets(), 3);
      ddp_testing::ExpectParametersNear(*model, *reference, 0, 0, "after the broadcast from rank 0");

      auto opt = MakeOptimizer(kind, *model);
      auto ref_opt = MakeOptimizer(kind, *reference);
      for (int step = 0; step < kSteps; ++step) {
        const Batch all = ddp_testing::MakeBatch(ctx.world_size * kPerRankBatch, kDims.front(), kDims.back(),
                                                 100 + step);
        const Batch mine = ddp_testing::Rows(all, ctx.rank * kPerRankBatch, (ctx.rank + 1) * kPerRankBatch);
        // SGD clears with set_to_none (fresh gradients each step, copied into the buckets), AdamW with
        // zeros (gradients stay bucket views): both ways must average.
        opt->ZeroGrad(/*set_to_none=*/kind == Opt::kSgdMomentum);
        autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(mine.x)), mine.labels));
        opt->Step();

        ref_opt->ZeroGrad();
        autograd::Backward(autograd::CrossEntropy(reference->Forward(Variable(all.x)), all.labels));
        ref_opt->Step();

        const std::string when = absl::StrCat("after ", name, " step ", step + 1, " on ", ctx.world_size, " ranks");
        ddp_testing::ExpectParametersNear(*model, *reference, 2e-6, 2e-5, when);
        ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *model, when);
      }
      EXPECT_EQ((*ddp)->reducer().num_synced_backwards(), kSteps);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpEquivalence,
                         ::testing::Values(Case{2, true}, Case{3, true}, Case{4, true}, Case{2, false},
                                           Case{3, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.world, "Ranks",
                                               info.param.bucket_view ? "BucketViews" : "Coalesced");
                         });

}  // namespace
}  // namespace tinyddp::dist
