// nn::Adam and nn::AdamW: torch.optim.Adam / AdamW's exact update rules (amsgrad and maximize left
// out), applied with the fused ops::AdamStep. For each parameter p with gradient g at step t = 1, 2, ...:
//   Adam:   g = g + weight_decay * p            AdamW:  p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
#ifndef TINYDDP_NN_ADAM_H_
#define TINYDDP_NN_ADAM_H_

#include <cstdint>
#include <vector>

#include "nn/optimizer.h"

namespace tinyddp::nn {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

/// AdamW's options differ only in the default weight decay (PyTorch's 1e-2).
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 1e-2; }
};

class Adam : public Optimizer {
 public:
  /// Preconditions (as PyTorch): lr, eps, weight_decay >= 0; 0 <= beta1, beta2 < 1.
  explicit Adam(std::vector<Variable> params, const AdamOptions& options = {});

  void Step() override;
  /// "state.<i>.step" (float32 scalar on the CPU), "state.<i>.exp_avg", "state.<i>.exp_avg_sq" for
  /// each parameter stepped at least once.
  TensorMap StateTensors() const override;
  absl::Status LoadStateTensors(const TensorMap& state) override;
  const AdamOptions& options() const { return options_; }
  /// Steps taken by parameter i (0 before its first). With a device learning rate, the count kept on the
  /// device (read from it: this waits for the GPU).
  int64_t step(size_t i) const;

  /// Optimizer::UseDeviceLr, and the step count moves to the device too: one float64 counter that each
  /// Step advances there before its update reads it, so a recorded step counts its replays (PyTorch's
  /// capturable=True). Then every parameter steps together: all must have taken the same number of steps
  /// (FailedPrecondition-style stop otherwise), and every Step needs a gradient for every parameter. The
  /// bias corrections are computed on the GPU (ops.h: within an ulp or two of the host's).
  void UseDeviceLr(const Tensor& lr) override;
  /// Without UseDeviceLr each Step passes its step count (the bias corrections) by value: not capturable.
  std::string WhyStepNotCapturable() const override;

 protected:
  Adam(std::vector<Variable> params, const AdamOptions& options, bool decoupled_weight_decay, const char* name);

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
  std::vector<Tensor> exp_avgs_, exp_avg_sqs_;  // by parameter index; undefined before its first step
  std::vector<int64_t> steps_;
  Tensor device_step_, one_;  // with a device learning rate: the step count on the device, and 1.0
  // Reused from step to step, so Step() does not allocate on the host once warm.
  std::vector<Tensor> step_params_, step_grads_, step_exp_avgs_, step_exp_avg_sqs_, step_copies_;
  std::vector<size_t> pending_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Variable> params, const AdamWOptions& options = {});
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_ADAM_H_
