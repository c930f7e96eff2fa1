// Distributed evaluation: see evaluate.h.
#include "examples/internal/evaluate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "autograd/grad_mode.h"
#include "base/status_macros.h"
#include "data/distributed_sampler.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace tinyddp::examples {

int64_t EvalShardSize(int64_t n, int world_size, int rank) {
  // Positions rank, rank + R, ... below n: ceil((n - rank) / R), and none when rank >= n.
  return n > rank ? (n - rank + world_size - 1) / world_size : 0;
}

std::vector<int64_t> EvalShardIndices(int64_t n, int world_size, int rank) {
  auto sampler = data::DistributedSampler::Create(
      n, {.num_replicas = world_size, .rank = rank, .shuffle = false, .seed = 0, .drop_last = false});
  std::vector<int64_t> indices = sampler.value().Indices();
  // The sampler's j-th index for this rank sits at global position rank + j * R; the ones at >= n
  // are the padding (repeats of the first examples), and they are the last ones.
  indices.resize(static_cast<size_t>(EvalShardSize(n, world_size, rank)));
  return indices;
}

absl::StatusOr<EvalSums> EvaluateShard(nn::Module& model, const data::Dataset& dataset,
                                       const std::vector<int64_t>& indices, Device device, int64_t batch_size) {
  autograd::NoGradGuard no_grad;  // no graph: evaluation never calls Backward
  const bool was_training = model.is_training();
  model.Eval();
  EvalSums sums;
  for (size_t begin = 0; begin < indices.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(indices.size(), begin + static_cast<size_t>(batch_size));
    absl::StatusOr<data::Batch> batch = dataset.GetBatch(absl::MakeConstSpan(indices.data() + begin, end - begin));
    RETURN_IF_ERROR(batch);
    const Tensor inputs = batch->inputs.To(device);
    const Tensor labels = batch->labels.To(device);
    const Tensor logits = model(autograd::Variable(inputs)).data();
    const double rows = static_cast<double>(end - begin);
    // CrossEntropy is the batch mean; times the rows it is the batch's sum, accumulated in double.
    sums.loss_sum += ops::CrossEntropy(logits, labels).Item() * rows;
    const std::vector<int64_t> predicted = ops::ArgMax(logits).ToVector<int64_t>();
    const std::vector<int64_t> truth = batch->labels.ToVector<int64_t>();
    for (size_t i = 0; i < truth.size(); ++i) sums.correct += predicted[i] == truth[i] ? 1 : 0;
    sums.count += rows;
  }
  model.Train(was_training);
  return sums;
}

absl::StatusOr<EvalMetrics> AllReduceEvalSums(dist::ProcessGroup& pg, Device device, const EvalSums& local) {
  // float64: a sum of 10^4 losses and counts stays exact enough to print 4 digits of accuracy.
  Tensor sums = Tensor::FromVector<double>({local.loss_sum, local.correct, local.count}, {3}, device);
  absl::Status status = pg.AllReduce(sums, dist::ReduceOp::kSum)->Wait();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("evaluation all_reduce: ", status.message()));
  }
  const std::vector<double> total = sums.ToVector<double>();
  EvalMetrics m;
  m.count = static_cast<int64_t>(total[2]);
  if (total[2] > 0) {
    m.loss = total[0] / total[2];
    m.accuracy = total[1] / total[2];
  }
  return m;
}

}  // namespace tinyddp::examples
