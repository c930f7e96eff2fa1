// LossWindow over 3 real Gloo ranks: the flushed value is the mean over ranks of each rank's loss sum,
// and a NaN injected into one rank's loss at one step stops every rank with an error that names that
// step and that rank, even though the other ranks' later losses are NaN too.
#include "examples/internal/loss_window.h"

#include <cmath>
#include <string>

#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

Tensor Loss(double value) { return Tensor::FromVector<float>({static_cast<float>(value)}, {1}); }

TEST(LossWindow, FlushReturnsTheMeanOverRanksOfEachRanksSum) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    LossWindow window(Device::CPU(), 5, /*check_finite=*/true);
    // Rank r's losses over steps 10..14: 0.25 * (step - 9) + r.
    for (int64_t step = 10; step < 15; ++step) window.Add(Loss(0.25 * (step - 9) + ctx.rank), step);
    EXPECT_EQ(window.steps(), 5);
    absl::StatusOr<double> sum = window.Flush(**pg);
    ASSERT_TRUE(sum.ok()) << sum.status();
    // Per rank: 0.25 * 15 + 5r; mean over r = 0, 1, 2: 3.75 + 5.
    EXPECT_NEAR(*sum, 8.75, 1e-5);
    EXPECT_EQ(window.steps(), 0);
    window.Add(Loss(1.5), 15);
    sum = window.Flush(**pg);
    ASSERT_TRUE(sum.ok());
    EXPECT_NEAR(*sum, 1.5, 1e-6) << "the window starts empty after a flush";
  });
}

TEST(LossWindow, ANanOnOneRankNamesTheFirstStepAndRankThatSawIt) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    LossWindow window(Device::CPU(), 7, /*check_finite=*/true);
    // Rank 2 sees NaN at step 23; from step 24 every rank does (the NaN reached the weights).
    for (int64_t step = 20; step < 27; ++step) {
      const bool nan = (ctx.rank == 2 && step >= 23) || step >= 24;
      window.Add(Loss(nan ? std::nan("") : 0.1 * step), step);
    }
    absl::StatusOr<double> sum = window.Flush(**pg);
    ASSERT_FALSE(sum.ok());
    const std::string m(sum.status().message());
    if (ctx.rank == 2) {
      EXPECT_TRUE(absl::IsDataLoss(sum.status())) << sum.status();
      EXPECT_NE(m.find("non-finite training loss (nan) at global step 23, on this rank first"), std::string::npos) << m;
      EXPECT_NE(m.find("--allow_nonfinite"), std::string::npos) << m;
    } else {
      EXPECT_TRUE(absl::IsAborted(sum.status())) << sum.status();
      EXPECT_NE(m.find("rank 2 saw a non-finite training loss at global step 23"), std::string::npos) << m;
    }
  });
}

TEST(LossWindow, AllowNonfiniteTrainsOn) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    LossWindow window(Device::CPU(), 3, /*check_finite=*/false);
    window.Add(Loss(std::nan("")), 0);
    absl::StatusOr<double> sum = window.Flush(**pg);
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_TRUE(std::isnan(*sum));
  });
}

}  // namespace
}  // namespace tinyddp::examples
