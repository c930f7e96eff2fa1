// CopyEngineHook where the copy engines cannot run (CPU ranks over Gloo; a build without CUDA): the hook
// says why it is off, every bucket takes the group's own all_reduce and the bucket table says so, and DDP
// through the hook trains exactly as DDP with its default hook. The copy engines themselves are tested on
// GPUs: copy_engine_one_gpu_test, copy_engine_all_reduce_test, tests/ddp_equivalence's GPU test.
#include "dist/accel/copy_engine/copy_engine_hook.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using testing::RankContext;
using testing::RunOnRanks;

TEST(CopyEngineHook, OnGlooItIsOffSaysWhyAndTrainsExactlyAsTheDefaultHook) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    absl::StatusOr<std::shared_ptr<CopyEngineHook>> made = CopyEngineHook::Create(*pg);
    ASSERT_TRUE(made.ok()) << made.status();
    const std::shared_ptr<CopyEngineHook> hook = *made;
    EXPECT_FALSE(hook->on());
    EXPECT_TRUE(absl::StrContains(hook->off_reason(), "gloo")) << hook->off_reason();
    EXPECT_EQ(hook->Describe(), absl::StrCat("copy engines: off (", hook->off_reason(), ")\n"));
    EXPECT_EQ(hook->min_bytes(), 0);

    nn::MlpOptions mo;
    mo.seed = 11;
    auto model = nn::MLP({13, 17, 11, 5}, mo);
    auto reference = nn::MLP({13, 17, 11, 5}, mo);
    DdpOptions options;
    options.first_bucket_bytes = 256;
    options.bucket_cap_bytes = 700;
    DdpOptions with_hook = options;
    with_hook.comm_hook = hook->AsCommHook();
    auto ddp = DistributedDataParallel::Create(*model, pg, with_hook);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    auto plain = DistributedDataParallel::Create(*reference, pg, options);
    ASSERT_TRUE(plain.ok()) << plain.status();
    for (int b = 0; b < (*ddp)->reducer().num_buckets(); ++b) {
      EXPECT_STREQ((*ddp)->BucketPath(b), "Gloo all_reduce") << "bucket " << b;
      EXPECT_FALSE(hook->Takes((*ddp)->reducer().grad_bucket(b))) << "bucket " << b;
    }

    nn::SGD sgd(model->Parameters(), {.lr = 0.1, .momentum = 0.9});
    nn::SGD reference_sgd(reference->Parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {  // across the rebuild in the second forward
      const ddp_testing::Batch batch = ddp_testing::MakeBatch(6, 13, 5, 40 + 7 * ctx.rank + step);
      sgd.ZeroGrad();
      autograd::Backward(autograd::CrossEntropy((*ddp)->Forward(Variable(batch.x)), batch.labels));
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      sgd.Step();
      reference_sgd.ZeroGrad();
      autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(batch.x)), batch.labels));
      reference_sgd.Step();
      const std::string when = absl::StrCat("after step ", step + 1);
      ddp_testing::ExpectParametersNear(*model, *reference, 0, 0, when);
      ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *model, when);
    }
    EXPECT_EQ(hook->calls(), 0);
  });
}

}  // namespace
}  // namespace tinyddp::dist
