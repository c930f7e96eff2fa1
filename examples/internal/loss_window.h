// LossWindow: the training losses since the last logged step, kept on the device so that recording a
// step's loss costs no synchronisation, and the check that stops a run whose loss is no longer finite.
//
// Each step's (rank-local) loss is copied into its own slot of a small device tensor and added to a
// running sum. Flush(), a collective run at the logged steps, all_reduces the sum (averaged over ranks)
// and returns it. When that mean is NaN or infinite, some rank saw a non-finite loss in the window; the
// ranks then read their slots and agree (one more all_reduce, MIN) on the first step and rank that saw
// one, so the error names them: with a NaN in one rank's batch, every rank's weights are NaN one step
// later, and only the first (step, rank) points at the cause. Off with --allow_nonfinite.
//
// Sits between the training loop (examples/ddp_mlp.cc) and the process group.
#ifndef TINYDDP_EXAMPLES_INTERNAL_LOSS_WINDOW_H_
#define TINYDDP_EXAMPLES_INTERNAL_LOSS_WINDOW_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::examples {

class LossWindow {
 public:
  /// Room for `capacity` steps between two flushes (the most the loop takes: --log_every, or the
  /// steps of an epoch if fewer), on `device`. `check_finite`: Flush fails on a non-finite loss.
  LossWindow(Device device, int64_t capacity, bool check_finite);

  /// Records one step's loss (a one-element tensor on the device) taken at global step `step`.
  /// Precondition: fewer than `capacity` steps since the last Flush.
  void Add(const Tensor& loss, int64_t step);
  int64_t steps() const { return steps_; }

  /// Collective: the mean over ranks of the sum of this window's losses; resets the window. With
  /// check_finite, a non-finite mean is an error naming the first global step and rank that saw one:
  /// DataLoss on that rank ("...; lower --lr, check the data, or pass --allow_nonfinite"), Aborted on
  /// the others (they stop because of it).
  absl::StatusOr<double> Flush(dist::ProcessGroup& pg);

 private:
  absl::Status FindFirstNonFinite(dist::ProcessGroup& pg, double mean);

  Device device_;
  bool check_finite_;
  Tensor sum_;                // float32 [1]
  Tensor per_step_;           // float32 [capacity]: this window's losses, one per step
  std::vector<Tensor> slots_;  // views of per_step_'s elements, made once
  int64_t steps_ = 0;
  int64_t first_step_ = 0;    // global step of slot 0
};

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_LOSS_WINDOW_H_
