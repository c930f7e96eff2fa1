// Losses with their backwards (autograd/functions.h).
#include <utility>

#include "autograd/functions.h"
#include "autograd/internal/broadcast.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {

Variable LogSoftmax(const Variable& x) {
  const Tensor xd = x.data();
  return Record("LogSoftmax", ops::LogSoftmax(xd), {x}, [xd](const Tensor& g, const NeedsGrad&) -> Grads {
    // y_ic = x_ic - log sum_k exp(x_ik), so dx_ic = g_ic - softmax(x)_ic * sum_k g_ik.
    // tensor/ops.h has no exp, but the fused cross-entropy kernel also returns softmax(x) (the labels
    // do not affect it). Not a training-path op: classifiers use CrossEntropy, which is fused.
    Tensor labels = Tensor::Empty({xd.size(0)}, DType::kInt64, xd.device());
    ops::Fill(labels, 0.0);
    Tensor softmax;
    ops::CrossEntropy(xd, labels, &softmax);
    if (softmax.dtype() != g.dtype()) softmax = ops::Cast(softmax, g.dtype());  // bfloat16 x: softmax is float32
    const Tensor row_sums = internal::BroadcastAlongDim(ops::Sum(g, 1), g.shape(), 1);
    return {ops::Sub(g, ops::Mul(softmax, row_sums))};
  });
}

Variable CrossEntropy(const Variable& logits, const Tensor& labels) {
  // The forward keeps softmax(logits); the backward is then one fused kernel:
  // (softmax - onehot(labels)) * g / N. Of bfloat16 logits, the loss and the softmax are float32 (as under
  // PyTorch's autocast) and the logits' gradient is computed in float32 and stored as bfloat16.
  Tensor softmax;
  Tensor loss = ops::CrossEntropy(logits.data(), labels, &softmax);
  const DType grad_dtype = logits.dtype();
  return Record("CrossEntropy", std::move(loss), {logits},
                [softmax, labels, grad_dtype](const Tensor& g, const NeedsGrad&) -> Grads {
                  return {ops::CrossEntropyBackward(softmax, labels, g, grad_dtype)};
                });
}

Variable MseLoss(const Variable& a, const Variable& b) {
  const Tensor ad = a.data(), bd = b.data();
  return Record("MseLoss", ops::MseLoss(ad, bd), {a, b}, [ad, bd](const Tensor& g, const NeedsGrad& needs) {
    // loss = mean((a - b)^2): dloss/da = 2 (a - b) / n, dloss/db = -dloss/da; g stays on the device.
    // Of bfloat16 inputs the loss is float32; their gradients are bfloat16 again.
    const Tensor g_like = g.dtype() == ad.dtype() ? g : ops::Cast(g, ad.dtype());
    Tensor ga = ops::Mul(ops::Sub(ad, bd), internal::BroadcastScalar(g_like, ad.shape()));
    ops::ScaleInPlace(ga, 2.0 / static_cast<double>(ad.numel()));
    Grads grads(2);
    if (needs[1]) grads[1] = ops::Scale(ga, -1.0);
    if (needs[0]) grads[0] = std::move(ga);
    return grads;
  });
}

}  // namespace tinyddp::autograd
