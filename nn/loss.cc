// Loss modules (nn/loss.h).
#include "nn/loss.h"

#include "autograd/functions.h"

namespace tinyddp::nn {

Variable CrossEntropyLoss::operator()(const Variable& logits, const Tensor& labels) const {
  return autograd::CrossEntropy(logits, labels);
}

Variable MSELoss::operator()(const Variable& prediction, const Variable& target) const {
  return autograd::MseLoss(prediction, target);
}

}  // namespace tinyddp::nn
