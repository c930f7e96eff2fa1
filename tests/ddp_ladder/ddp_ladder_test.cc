// The DDP ladder (dist/ladder) on real processes over Gloo: the four rungs - naive, flat, bucketed,
// full - train to the same weights as one process on the concatenated batch (so, to each other's), on 2
// and 3 ranks with odd layer sizes, and every rank holds the same bits; gradient accumulation under
// no_sync equals one step on the concatenated micro-batches on every rung; the bucketed rung names a
// parameter that got no gradient; the factory refuses unknown rungs and options only the full DDP has.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/bf16_compress_hook.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ladder/ladder.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "tests/ddp_ladder/ladder_checks.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using testing::RankContext;
using testing::RunOnRanks;

TEST(DdpLadder, EveryRungMatchesOneProcessOnTheConcatenatedBatchAndStaysBitIdenticalAcrossRanks) {
  for (int world : {2, 3}) {
    RunOnRanks(world, [](const RankContext& ctx) {
      auto pg = ddp_testing::MakeGlooGroup(ctx);
      ASSERT_NE(pg, nullptr);
      ladder_testing::ExpectEveryRungMatchesOneProcess(*pg, Device::CPU());
    });
  }
}

class DdpLadderAccumulation : public ::testing::TestWithParam<std::string> {};

TEST_P(DdpLadderAccumulation, MicroBatchesUnderNoSyncEqualOneStepOnTheirConcatenation) {
  const std::string rung = GetParam();
  for (int world : {2, 3}) {
    RunOnRanks(world, [rung](const RankContext& ctx) {
      auto pg = ddp_testing::MakeGlooGroup(ctx);
      ASSERT_NE(pg, nullptr);
      ladder_testing::ExpectAccumulationMatchesOneLargeBatch(*pg, Device::CPU(), rung);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Rungs, DdpLadderAccumulation, ::testing::ValuesIn(ladder::RungNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Two linear layers of which the forward uses only the first.
class HalfUsed : public nn::Module {
 public:
  HalfUsed() {
    used_ = RegisterModule("used", std::make_shared<nn::Linear>(7, 3));
    unused_ = RegisterModule("unused", std::make_shared<nn::Linear>(3, 3));
  }
  Variable Forward(const Variable& x) override { return used_->Forward(x); }
  std::string ToString() const override { return "HalfUsed"; }

 private:
  std::shared_ptr<nn::Linear> used_, unused_;
};

TEST(DdpLadder, BucketedRungNamesTheParametersThatGotNoGradient) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    HalfUsed model;
    DdpOptions options;
    options.first_bucket_bytes = options.bucket_cap_bytes = 1;  // a bucket per tensor
    auto dp = ladder::CreateDataParallel("bucketed", model, pg, options);
    ASSERT_TRUE(dp.ok()) << dp.status();
    const ddp_testing::Batch batch = ddp_testing::MakeBatch(4, 7, 3, 5 + ctx.rank);
    autograd::Backward(autograd::CrossEntropy((*dp)->Forward(Variable(batch.x)), batch.labels));
    const absl::Status status = (*dp)->FinishBackward();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("unused.weight, unused.bias"), std::string::npos) << status;
    EXPECT_NE(status.message().find("find_unused_parameters"), std::string::npos) << status;
  });
}

TEST(DdpLadder, FactoryRefusesUnknownRungsAndOptionsOnlyTheFullDdpHas) {
  RunOnRanks(1, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = nn::MLP({5, 4, 3});
    auto bogus = ladder::CreateDataParallel("fancy", *model, pg, {});
    EXPECT_EQ(bogus.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bogus.status().message().find("naive, flat, bucketed, full"), std::string::npos) << bogus.status();
    DdpOptions unused;
    unused.find_unused_parameters = true;
    auto naive = ladder::CreateDataParallel("naive", *model, pg, unused);
    EXPECT_EQ(naive.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(naive.status().message().find("find_unused_parameters needs the full"), std::string::npos)
        << naive.status();
    DdpOptions bf16;
    bf16.comm_hook = Bf16CompressHook();
    EXPECT_EQ(ladder::CreateDataParallel("bucketed", *model, pg, bf16).status().code(),
              absl::StatusCode::kInvalidArgument);
    for (const std::string& name : ladder::RungNames()) {
      auto dp = ladder::CreateDataParallel(name, *model, pg, {});
      ASSERT_TRUE(dp.ok()) << name << ": " << dp.status();
      EXPECT_FALSE((*dp)->Describe().empty());
      EXPECT_FALSE((*dp)->AllReduceBytes().empty());
    }
  });
}

}  // namespace
}  // namespace tinyddp::dist
