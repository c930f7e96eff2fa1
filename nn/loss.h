// Loss modules, as torch.nn.CrossEntropyLoss and torch.nn.MSELoss with their default mean reduction.
// Thin callable wrappers over autograd::CrossEntropy (fused softmax + cross-entropy) and
// autograd::MseLoss; both return a scalar Variable to call Backward on.
#ifndef TINYDDP_NN_LOSS_H_
#define TINYDDP_NN_LOSS_H_

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace tinyddp::nn {

using autograd::Variable;

class CrossEntropyLoss {
 public:
  /// Mean over the batch of -log softmax(logits)[label]. logits [N, C] float; labels int64 [N] in [0, C).
  Variable operator()(const Variable& logits, const Tensor& labels) const;
};

class MSELoss {
 public:
  /// mean((prediction - target)^2) over all elements; same shapes.
  Variable operator()(const Variable& prediction, const Variable& target) const;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_LOSS_H_
