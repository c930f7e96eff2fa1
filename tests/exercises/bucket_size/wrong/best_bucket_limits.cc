// Exercise 4, a known WRONG solution, kept so that CI proves the check rejects it
// (:rejects_wrong_solution). It tries every limit that makes a difference, as the reference does, but
// keeps the one with the shortest step when nothing overlaps (PredictStepOn(..., overlap = false)):
// every bucket then costs the ring's latency in full, so it always picks one bucket for the whole model.
// Right from 256 GPUs, where overlap no longer pays; wrong on one node, where small buckets hide behind
// backward. Overlap is what DDP's buckets are for.
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
  double best_step = std::numeric_limits<double>::infinity();
  for (int64_t first : firsts) {
    for (int64_t cap : caps) {
      absl::StatusOr<dist::StepProfile> profile = dist::Rebucket(traced, model, first, cap);
      if (!profile.ok()) continue;
      const double step = dist::PredictStepOn(*profile, gpus, cluster, /*overlap=*/false).step_us;  // the mistake
      if (step < best_step) {
        best_step = step;
        best = {first, cap};
      }
    }
  }
  return best;
}

}  // namespace tinyddp::exercises
