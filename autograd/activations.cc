// Activations with their backwards (autograd/functions.h). Both backwards are fused kernels in
// tensor/ops.h: one pass over the gradient instead of building the derivative from elementwise ops.
#include <utility>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {

Variable Relu(const Variable& x) {
  // The output is enough to know where the input was positive, so the input need not be kept.
  Tensor y = ops::Relu(x.data());
  return Record("Relu", y, {x}, [y](const Tensor& g, const NeedsGrad&) -> Grads { return {ops::ReluBackward(g, y)}; });
}

Variable Gelu(const Variable& x) {
  const Tensor xd = x.data();
  return Record("Gelu", ops::Gelu(xd), {x},
                [xd](const Tensor& g, const NeedsGrad&) -> Grads { return {ops::GeluBackward(g, xd)}; });
}

}  // namespace tinyddp::autograd
