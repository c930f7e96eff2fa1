// Linear and MatMul with their backwards (autograd/functions.h). The gradients of a GEMM are GEMMs:
// for y = x @ w^T, dx = dy @ w and dw = dy^T @ x; the bias gradient is the column sum of dy.
// Linear's dw may be written straight into the weight's .grad or its gradient destination
// (NeedsGrad::accumulate_into, NeedsGrad::write_into).
#include <utility>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {

Variable Linear(const Variable& x, const Variable& w, const Variable& bias) {
  const Tensor xd = x.data(), wd = w.data();
  Tensor y = ops::Linear(xd, wd, bias.defined() ? bias.data() : Tensor());
  // Two nodes, so that the parameters' gradients are final before the input's gradient is computed:
  //   y.grad_fn = "Linear": dw and db, and dy passed on unchanged to
  //   "LinearInput":        dx = dy @ w, towards x's grad_fn.
  // The engine runs a leaf's AccumulateGrad (and its hooks) as soon as its gradient is complete, so w's
  // and b's hooks fire between the two GEMMs. DDP's all_reduce of their bucket then starts after dw on
  // the GPU, not after dx: one GEMM earlier per layer, more time to overlap it. The carrier `through`
  // holds y's value only to give dy's shape; it saves nothing.
  Variable through = Record("LinearInput", y, {x}, [wd](const Tensor& g, const NeedsGrad&) -> Grads {
    return {ops::MatMul(g, wd)};  // [N,out] @ [out,in]
  });
  BackwardFn backward = [xd](const Tensor& g, const NeedsGrad& needs) -> Grads {
    Grads grads(needs.size());
    if (needs[1]) {
      // dw = g^T @ x: [out,N] @ [N,in]. When the engine offers the weight's existing .grad (a DDP bucket
      // view, or a gradient being accumulated over micro-batches), the GEMM adds into it directly; when
      // it offers the weight's gradient destination (a DDP bucket view after ZeroGrad(set_to_none)),
      // the GEMM writes there.
      const Tensor* add_to = needs.accumulate_into(1);
      const Tensor* into = add_to != nullptr ? add_to : needs.write_into(1);
      if (into != nullptr && !into->SharesStorageWith(g) && !into->SharesStorageWith(xd)) {
        Tensor dw = *into;
        ops::MatMulInto(dw, g, xd, /*trans_a=*/true, /*trans_b=*/false, /*alpha=*/1.f,
                        /*beta=*/add_to != nullptr ? 1.f : 0.f);
      } else {
        grads[1] = ops::MatMul(g, xd, /*trans_a=*/true, /*trans_b=*/false);
      }
    }
    if (needs.size() > 2 && needs[2]) grads[2] = ops::Sum(g, 0);  // [out]
    if (needs[0]) grads[0] = g;  // to "LinearInput"
    return grads;
  };
  if (bias.defined()) return Record("Linear", std::move(y), {through, w, bias}, std::move(backward));
  return Record("Linear", std::move(y), {through, w}, std::move(backward));
}

Variable MatMul(const Variable& a, const Variable& b, bool trans_a, bool trans_b) {
  const Tensor ad = a.data(), bd = b.data();
  Tensor y = ops::MatMul(ad, bd, trans_a, trans_b);
  return Record("MatMul", std::move(y), {a, b}, [ad, bd, trans_a, trans_b](const Tensor& g, const NeedsGrad& needs) {
    // With A = op(a), B = op(b), y = A @ B: dA = g @ B^T and dB = A^T @ g. When an operand was used
    // transposed, its gradient is the transpose of that, which a flag swap computes without a copy.
    Grads grads(2);
    if (needs[0]) grads[0] = trans_a ? ops::MatMul(bd, g, trans_b, true) : ops::MatMul(g, bd, false, !trans_b);
    if (needs[1]) grads[1] = trans_b ? ops::MatMul(g, ad, true, trans_a) : ops::MatMul(ad, g, !trans_a, false);
    return grads;
  });
}

}  // namespace tinyddp::autograd
