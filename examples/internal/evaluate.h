// Distributed evaluation: every rank scores its shard of the test set, and one all_reduce combines the
// sums, so the job's test loss and accuracy count each test example exactly once.
//
// The shard is DistributedSampler's split without shuffling (rank r gets positions r, r+R, r+2R, ... of
// [0, N) padded to a multiple of R). The padding repeats the first examples so every rank runs the same
// number of training steps; for a metric that would count those examples twice (10000 test images on
// 3 ranks: 10002 predictions). Position p is padding exactly when p >= N, and padding positions come
// last on every rank, so each rank simply keeps the first EvalShardSize(N, R, r) indices of its shard.
//
// Sits between data/distributed_sampler.h and the training loop (examples/ddp_mlp.cc), which calls
// Evaluate after each epoch on every rank.
#ifndef TINYDDP_EXAMPLES_INTERNAL_EVALUATE_H_
#define TINYDDP_EXAMPLES_INTERNAL_EVALUATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "dist/process_group/process_group.h"
#include "nn/module.h"
#include "tensor/device.h"

namespace tinyddp::examples {

/// Sums over some examples: what one rank contributes before the all_reduce.
struct EvalSums {
  double loss_sum = 0;  // sum of per-example cross-entropy
  double correct = 0;   // examples whose argmax matches the label
  double count = 0;     // examples scored
};

/// The job's metrics, identical on every rank after AllReduceEvalSums.
struct EvalMetrics {
  double loss = 0;      // mean cross-entropy over the test set
  double accuracy = 0;  // fraction correct, in [0, 1]
  int64_t count = 0;    // examples scored in total: the test set's size when sharded correctly
};

/// How many of rank `rank`'s num_samples sampler positions are real examples, not padding:
/// |{j : rank + j * world_size < n}|. Preconditions: n >= 0, 0 <= rank < world_size.
int64_t EvalShardSize(int64_t n, int world_size, int rank);

/// This rank's unpadded shard of [0, n): DistributedSampler(n, world_size, rank, shuffle=false)'s
/// indices with the padding removed. Over all ranks every index in [0, n) appears exactly once.
std::vector<int64_t> EvalShardIndices(int64_t n, int world_size, int rank);

/// Scores `model` on the examples of `dataset` at `indices`, in batches of `batch_size`, with grad
/// recording off. Batches are copied to `device` (the model's). Errors come from the dataset.
absl::StatusOr<EvalSums> EvaluateShard(nn::Module& model, const data::Dataset& dataset,
                                       const std::vector<int64_t>& indices, Device device, int64_t batch_size = 1000);

/// Sums every rank's EvalSums with one all_reduce (a float64 tensor of 3 on `device`, the group's
/// device) and turns them into metrics. Collective: every rank of `pg` calls it. A failed collective
/// comes back as its Status.
absl::StatusOr<EvalMetrics> AllReduceEvalSums(dist::ProcessGroup& pg, Device device, const EvalSums& local);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_EVALUATE_H_
