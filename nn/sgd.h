// nn::SGD: torch.optim.SGD's exact update rule, applied with the fused ops::SgdStep.
//
// For each parameter p with gradient g (PyTorch's documented algorithm):
//   g = g + weight_decay * p
//   if momentum != 0:  buf = (first step) ? g : momentum * buf + (1 - dampening) * g
//                      g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
#ifndef TINYDDP_NN_SGD_H_
#define TINYDDP_NN_SGD_H_

#include <vector>

#include "nn/optimizer.h"

namespace tinyddp::nn {

struct SgdOptions {
  double lr = 1e-3;  // PyTorch's default
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  /// Preconditions (as PyTorch): lr, momentum, weight_decay >= 0; nesterov needs momentum > 0 and
  /// dampening == 0.
  SGD(std::vector<Variable> params, const SgdOptions& options = {});

  void Step() override;
  /// "state.<i>.momentum_buffer" for each parameter stepped with momentum != 0.
  TensorMap StateTensors() const override;
  absl::Status LoadStateTensors(const TensorMap& state) override;
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // by parameter index; undefined before its first step
  // Reused from step to step, so Step() does not allocate on the host once warm.
  std::vector<Tensor> step_params_, step_grads_, step_buffers_, step_copies_;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_SGD_H_
