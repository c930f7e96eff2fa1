// Exercise 4, a reference solution: every limit that can make a difference, tried. A bucket closes once
// it holds at least its limit, so the buckets only change when a limit crosses the size of some run of
// consecutive gradients (in the order backward produces them); those sizes are the candidates, for the
// first bucket (runs from the start) and for the others (any run). Ten parameters give 10 x 55 tries.
#include "tests/exercises/bucket_size/best_bucket_limits.h"

#include <limits>
#include <vector>

namespace tinyddp::exercises {

BucketLimits BestBucketLimits(const dist::StepProfile& traced, const dist::ModelGradients& model, int gpus,
                              const dist::ClusterModel& cluster) {
  std::vector<int64_t> in_order;
  for (size_t p : model.order) in_order.push_back(model.bytes[p]);
  std::vector<int64_t> firsts, caps;
  for (size_t i = 0; i < in_order.size(); ++i) {
    int64_t run = 0;
    for (size_t j = i; j < in_order.size(); ++j) {
      run += in_order[j];
      caps.push_back(run);
      if (i == 0) firsts.push_back(run);
    }
  }
  BucketLimits best;
  double best_exposed = std::numeric_limits<double>::infinity();
  for (int64_t first : firsts) {
    for (int64_t cap : caps) {
      absl::StatusOr<dist::StepProfile> profile = dist::Rebucket(traced, model, first, cap);
      if (!profile.ok()) continue;
      const double exposed = dist::PredictStepOn(*profile, gpus, cluster).exposed_us;
      if (exposed < best_exposed) {
        best_exposed = exposed;
        best = {first, cap};
      }
    }
  }
  return best;
}

}  // namespace tinyddp::exercises
