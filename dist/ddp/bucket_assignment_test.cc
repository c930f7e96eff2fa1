// Bucket assignment (dist/ddp/bucket_assignment.h) against PyTorch's rule: walk the parameters in gradient
// order, close a bucket once it reaches its limit (the first limit for the first bucket of a dtype),
// never split a parameter, never mix dtypes.
#include "dist/ddp/bucket_assignment.h"

#include <vector>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<BucketParam> Float32Params(const std::vector<int64_t>& bytes) {
  std::vector<BucketParam> params;
  for (int64_t b : bytes) params.push_back({b, DType::kFloat32});
  return params;
}

TEST(AssignBuckets, WalksReverseRegistrationOrderAndClosesTheFirstBucketAtTheFirstLimit) {
  // Registration order 0..5; gradients arrive 5, 4, ..., 0.
  const auto params = Float32Params({400, 12, 300, 8, 44, 4});
  const Buckets buckets = AssignBuckets(params, ReverseOrder(6), /*first=*/40, /*cap=*/500);
  // 4 + 44 = 48 >= 40 closes bucket 0; 8 + 300 + 12 = 320 < 500, + 400 = 720 >= 500 closes bucket 1.
  EXPECT_EQ(buckets, (Buckets{{5, 4}, {3, 2, 1, 0}}));
}

TEST(AssignBuckets, AParameterLargerThanTheCapGetsABucketOfItsOwnAndIsNeverSplit) {
  const auto params = Float32Params({100, 5000, 100, 100});
  const Buckets buckets = AssignBuckets(params, ReverseOrder(4), /*first=*/150, /*cap=*/1000);
  EXPECT_EQ(buckets, (Buckets{{3, 2}, {1}, {0}}));
}

TEST(AssignBuckets, FollowsAnObservedOrderInsteadOfRegistrationOrder) {
  const auto params = Float32Params({64, 64, 64, 64, 64});
  const std::vector<size_t> observed = {2, 0, 4, 1, 3};
  const Buckets buckets = AssignBuckets(params, observed, /*first=*/64, /*cap=*/128);
  EXPECT_EQ(buckets, (Buckets{{2}, {0, 4}, {1, 3}}));
}

TEST(AssignBuckets, KeepsDTypesApartAndOrdersBucketsByWhenTheyBecomeReady) {
  std::vector<BucketParam> params = {
      {40, DType::kFloat32}, {40, DType::kFloat64}, {40, DType::kFloat32}, {40, DType::kFloat64}, {40, DType::kFloat32}};
  // Gradient order 4, 3, 2, 1, 0; each dtype fills its own buckets (first limit 80, then 80).
  const Buckets buckets = AssignBuckets(params, ReverseOrder(5), /*first=*/80, /*cap=*/80);
  // float32: {4, 2} closes at position 2; float64: {3, 1} closes at position 3; {0} is left open, ready last.
  EXPECT_EQ(buckets, (Buckets{{4, 2}, {3, 1}, {0}}));
}

TEST(AssignBuckets, LastPartialBucketHoldsTheRemainingParameters) {
  const auto params = Float32Params({10, 10, 10});
  EXPECT_EQ(AssignBuckets(params, ReverseOrder(3), 1000, 1000), (Buckets{{2, 1, 0}}));
  EXPECT_EQ(AssignBuckets(params, ReverseOrder(3), 1, 1), (Buckets{{2}, {1}, {0}}));
}

TEST(AssignBucketsDeathTest, RejectsAnOrderThatIsNotAPermutation) {
  const auto params = Float32Params({10, 10, 10});
  EXPECT_DEATH(AssignBuckets(params, {0, 1, 1}, 10, 10), "order is not a permutation: 1 appears twice");
  EXPECT_DEATH(AssignBuckets(params, {0, 1}, 10, 10), "order has 2 entries for 3 parameters");
}

}  // namespace
}  // namespace tinyddp::dist
