// Learning-rate schedules: the formulas at and around every boundary.
#include "nn/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tinyddp::nn {
namespace {

TEST(ConstantLr, IsTheBaseAtEveryStep) {
  ConstantLr s(0.3);
  for (int64_t step : {0, 1, 1000}) EXPECT_EQ(s.LrAt(step), 0.3);
}

TEST(StepLr, MultipliesByGammaEveryStepSizeStepsLikeTorch) {
  StepLr s(0.5, 3, 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.5);
  EXPECT_DOUBLE_EQ(s.LrAt(2), 0.5);
  EXPECT_DOUBLE_EQ(s.LrAt(3), 0.05);
  EXPECT_DOUBLE_EQ(s.LrAt(5), 0.05);
  EXPECT_DOUBLE_EQ(s.LrAt(6), 0.005);
}

TEST(CosineWithWarmupLr, RampsLinearlyThenFollowsHalfACosineToTheMinimum) {
  CosineWithWarmupLr s(1.0, 4, 14, 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.25);
  EXPECT_DOUBLE_EQ(s.LrAt(3), 1.0);
  EXPECT_DOUBLE_EQ(s.LrAt(4), 1.0);  // decay starts at the top
  EXPECT_NEAR(s.LrAt(9), 0.1 + 0.9 * 0.5, 1e-12);  // halfway: cos(pi/2) = 0
  EXPECT_NEAR(s.LrAt(6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.2)), 1e-12);
  EXPECT_DOUBLE_EQ(s.LrAt(14), 0.1);
  EXPECT_DOUBLE_EQ(s.LrAt(100), 0.1);
  for (int64_t t = 4; t < 14; ++t) EXPECT_GT(s.LrAt(t), s.LrAt(t + 1)) << "monotone decay at " << t;
}

TEST(CosineWithWarmupLr, WithoutWarmupStartsAtTheBase) {
  CosineWithWarmupLr s(0.2, 0, 10);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.2);
  EXPECT_NEAR(s.LrAt(5), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.LrAt(10), 0.0);
}

}  // namespace
}  // namespace tinyddp::nn
