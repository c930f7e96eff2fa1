// Exercise 4 (docs/exercises.md): the bucket sizes that hide the most communication, for a given number
// of GPUs. docs/collectives.md shows that with PyTorch's defaults (a 1 MiB first bucket, 25 MiB after it)
// DDP's overlap stops paying on a ring of many GPUs: every bucket costs the ring's latency. Find, on the
// cost model, the limits that fit each scale. best_bucket_limits.cc is yours; reference/ holds a solution.
#ifndef TINYDDP_TESTS_EXERCISES_BUCKET_SIZE_BEST_BUCKET_LIMITS_H_
#define TINYDDP_TESTS_EXERCISES_BUCKET_SIZE_BEST_BUCKET_LIMITS_H_

#include <cstdint>

#include "tools/timeline/step_cost_model.h"

namespace tinyddp::exercises {

/// DdpOptions' two bucket limits.
struct BucketLimits {
  int64_t first_bucket_bytes = int64_t{1} << 20;
  int64_t bucket_cap_bytes = int64_t{25} << 20;
};

/// The limits under which the step of `traced`, re-bucketed for `model` (dist::Rebucket) and replayed on
/// `gpus` GPUs of `cluster` (dist::PredictStepOn, with overlap), exposes the least communication
/// (StepPrediction::exposed_us). Any limits that come within 1% (or 2 us) of the least will do.
BucketLimits BestBucketLimits(const dist::StepProfile& traced, const dist::ModelGradients& model, int gpus,
                              const dist::ClusterModel& cluster);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_BUCKET_SIZE_BEST_BUCKET_LIMITS_H_
