// LossWindow: see loss_window.h.
#include "examples/internal/loss_window.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::examples {

LossWindow::LossWindow(Device device, int64_t capacity, bool check_finite)
    : device_(device),
      check_finite_(check_finite),
      sum_(Tensor::Zeros({1}, DType::kFloat32, device)),
      per_step_(Tensor::Zeros({std::max<int64_t>(capacity, 1)}, DType::kFloat32, device)) {
  for (int64_t i = 0; i < per_step_.size(0); ++i) slots_.push_back(per_step_.Rows(i, i + 1));
}

void LossWindow::Add(const Tensor& loss, int64_t step) {
  const Tensor one = loss.View({1});
  ops::AddInto(sum_, one);
  if (steps_ == 0) first_step_ = step;
  if (steps_ < static_cast<int64_t>(slots_.size())) ops::CopyInto(slots_[steps_], one);
  ++steps_;
}

absl::StatusOr<double> LossWindow::Flush(dist::ProcessGroup& pg) {
  RETURN_IF_ERROR(pg.AllReduce(sum_, dist::ReduceOp::kAvg)->Wait());
  const double sum = sum_.Item();
  if (check_finite_ && !std::isfinite(sum)) RETURN_IF_ERROR(FindFirstNonFinite(pg, sum));
  ops::Fill(sum_, 0);
  steps_ = 0;
  return sum;
}

// Every rank proposes (its first non-finite step) * world + rank, or "none"; the minimum names the
// earliest step and, among the ranks that saw it then, the lowest rank.
absl::Status LossWindow::FindFirstNonFinite(dist::ProcessGroup& pg, double mean) {
  const std::vector<float> losses = per_step_.ToVector<float>();
  const int64_t recorded = std::min<int64_t>(steps_, static_cast<int64_t>(losses.size()));
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t mine = kNone;
  float my_value = 0;
  for (int64_t i = 0; i < recorded; ++i) {
    if (!std::isfinite(losses[i])) {
      mine = (first_step_ + i) * pg.size() + pg.rank();
      my_value = losses[i];
      break;
    }
  }
  Tensor first = Tensor::FromVector<int64_t>({mine}, {1}, device_);
  RETURN_IF_ERROR(pg.AllReduce(first, dist::ReduceOp::kMin)->Wait());
  const int64_t code = first.ToVector<int64_t>()[0];
  if (code == kNone) {
    // Every loss was finite but their sum overflowed: as diverged as a NaN.
    return absl::DataLossError(absl::StrFormat(
        "the training loss overflowed to %g over the steps from global step %d: the model diverged; lower "
        "--lr, check the data, or pass --allow_nonfinite to train on anyway",
        mean, first_step_));
  }
  const int64_t step = code / pg.size();
  const int rank = static_cast<int>(code % pg.size());
  if (rank != pg.rank()) {
    return absl::AbortedError(
        absl::StrFormat("stopping: rank %d saw a non-finite training loss at global step %d", rank, step));
  }
  return absl::DataLossError(absl::StrFormat(
      "non-finite training loss (%g) at global step %d, on this rank first: the model diverged or the batch "
      "holds NaN/Inf; lower --lr, check the data, or pass --allow_nonfinite to train on anyway",
      my_value, step));
}

}  // namespace tinyddp::examples
