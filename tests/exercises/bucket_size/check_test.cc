// Checks exercise 4 (best_bucket_limits.h) on the medium MLP traced on 2x H200 (docs/traces/): on 8, 64,
// 256 and 1024 GPUs of the cost model's cluster, the limits found must expose no more communication than
// the best of every limit that makes a difference (within 1% or 2 us).
//   ./bazelw test //tests/exercises/bucket_size:check             # your solution
//   ./bazelw test //tests/exercises/bucket_size:reference_check   # the reference (what CI runs)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/exercises/bucket_size/best_bucket_limits.h"

namespace tinyddp::exercises {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

double ExposedUs(const dist::StepProfile& traced, const dist::ModelGradients& model, int gpus,
                 const dist::ClusterModel& cluster, BucketLimits limits) {
  absl::StatusOr<dist::StepProfile> p =
      dist::Rebucket(traced, model, limits.first_bucket_bytes, limits.bucket_cap_bytes);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? dist::PredictStepOn(*p, gpus, cluster).exposed_us : std::numeric_limits<double>::infinity();
}

TEST(BestBucketLimits, HideAsMuchCommunicationAsAnyLimitsCanOnEveryScale) {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
                           "/docs/traces/ddp_medium_2xh200_ce.json";
  const dist::ModelGradients model = dist::MlpGradients({1024, 4096, 4096, 4096, 4096, 1024});
  absl::StatusOr<dist::ChromeTrace> trace = dist::ReadChromeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<dist::StepTimeline> timeline = dist::BuildStepTimeline(
      *trace, {.last_steps = 4, .bucket_bytes = dist::BucketBytesFor(model, 1 * kMiB, 25 * kMiB)});
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  absl::StatusOr<dist::StepProfile> traced = dist::ProfileFromTimeline(*timeline);
  ASSERT_TRUE(traced.ok()) << traced.status();
  const dist::ClusterModel cluster;

  // Every limit that makes a difference: the sizes of runs of consecutive gradients.
  std::vector<int64_t> in_order, runs, prefixes;
  for (size_t p : model.order) in_order.push_back(model.bytes[p]);
  for (size_t i = 0; i < in_order.size(); ++i) {
    int64_t run = 0;
    for (size_t j = i; j < in_order.size(); ++j) {
      run += in_order[j];
      runs.push_back(run);
      if (i == 0) prefixes.push_back(run);
    }
  }
  for (int gpus : {8, 64, 256, 1024}) {
    double least = std::numeric_limits<double>::infinity();
    for (int64_t first : prefixes) {
      for (int64_t cap : runs) least = std::min(least, ExposedUs(*traced, model, gpus, cluster, {first, cap}));
    }
    const BucketLimits found = BestBucketLimits(*traced, model, gpus, cluster);
    ASSERT_GT(found.first_bucket_bytes, 0);
    ASSERT_GT(found.bucket_cap_bytes, 0);
    const double exposed = ExposedUs(*traced, model, gpus, cluster, found);
    std::printf("%5d GPUs: first bucket %lld bytes, cap %lld bytes -> exposed %.0f us (the least: %.0f us)\n", gpus,
                static_cast<long long>(found.first_bucket_bytes), static_cast<long long>(found.bucket_cap_bytes),
                exposed, least);
    EXPECT_LE(exposed, least + std::max(2.0, 0.01 * least))
        << "on " << gpus << " GPUs other limits expose only " << least << " us";
  }
}

}  // namespace
}  // namespace tinyddp::exercises
