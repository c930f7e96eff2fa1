// Linear, LinearRelu and MatMul with their backwards (autograd/functions.h). The gradients of a GEMM are
// GEMMs: for y = x @ w^T, dx = dy @ w and dw = dy^T @ x; the bias gradient is the column sum of dy.
// Linear's dw and db may be written straight into the parameter's .grad or its gradient destination
// (NeedsGrad::accumulate_into, NeedsGrad::write_into), in the parameter's own dtype: float32 from
// bfloat16 operands under mixed precision, with no cast pass.
#include <functional>
#include <memory>
#include <utility>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "autograd/weight_grad_deferral.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

// The slot the engine offers for input i: its .grad to add into (beta 1) or its gradient destination
// to write (beta 0). Null when none is offered, or when it aliases an operand (then a fresh tensor).
const Tensor* OfferedSlot(const NeedsGrad& needs, size_t i, const Tensor& a, const Tensor& b, float* beta) {
  const Tensor* add_to = needs.accumulate_into(i);
  const Tensor* into = add_to != nullptr ? add_to : needs.write_into(i);
  if (into == nullptr || into->SharesStorageWith(a) || into->SharesStorageWith(b)) return nullptr;
  *beta = add_to != nullptr ? 1.f : 0.f;
  return into;
}

// dw = g^T @ x: [out,N] @ [N,in], of `dtype`. When the engine offers the weight's existing .grad (a DDP
// bucket view, or a gradient being accumulated over micro-batches) the GEMM adds into it; when it offers
// the weight's gradient destination (a DDP bucket view after ZeroGrad(set_to_none)) the GEMM writes
// there; either way the result is undefined (the slot holds it). Otherwise a new tensor.
Tensor WeightGrad(const Tensor& g, const Tensor& x, DType dtype, const NeedsGrad& needs, size_t i) {
  float beta = 0.f;
  if (const Tensor* slot = OfferedSlot(needs, i, g, x, &beta)) {
    Tensor dw = *slot;
    ops::MatMulInto(dw, g, x, /*trans_a=*/true, /*trans_b=*/false, /*alpha=*/1.f, beta);
    return Tensor();
  }
  Tensor dw = Tensor::Empty({g.size(1), x.size(1)}, dtype, g.device());
  ops::MatMulInto(dw, g, x, /*trans_a=*/true, /*trans_b=*/false);
  return dw;
}

// db = the column sum of g [N,out], of `dtype`, into the offered slot the same way.
Tensor BiasGrad(const Tensor& g, DType dtype, const NeedsGrad& needs, size_t i) {
  float beta = 0.f;
  if (const Tensor* slot = OfferedSlot(needs, i, g, g, &beta)) {
    Tensor db = *slot;
    ops::SumRowsInto(db, g, beta);
    return Tensor();
  }
  Tensor db = Tensor::Empty({g.size(1)}, dtype, g.device());
  ops::SumRowsInto(db, g);
  return db;
}

// A deferred weight or bias gradient (weight_grad_deferral.h), run at W: into the leaf's .grad as the slot of
// the undeferred backward would have been filled (add into a defined .grad, else write the gradient destination,
// else a fresh tensor), then the leaf's hooks.
void AccumulateDeferred(const std::shared_ptr<internal::VariableState>& leaf, Shape shape, DType dtype, Device device,
                        const std::function<void(Tensor& into, float beta)>& compute) {
  internal::VariableState& s = *leaf;
  if (!s.requires_grad) return;
  if (s.grad.defined()) {
    compute(s.grad, 1.f);
  } else if (s.grad_destination.defined()) {
    s.grad = s.grad_destination;
    compute(s.grad, 0.f);
  } else {
    Tensor fresh = Tensor::Empty(std::move(shape), dtype, device);
    compute(fresh, 0.f);
    s.grad = fresh;
  }
  const Variable handle(leaf);
  for (size_t i = 0; i < s.hooks.size(); ++i) s.hooks[i].second(handle);
}

// Under a WeightGradDeferral: dw and db left as W work, on g (the pre-activation's gradient) and x.
void DeferWeightGrads(WeightGradDeferral& defer, const Tensor& g, const Tensor& xd, const Variable& w,
                      const Variable& bias, DType w_dtype, DType b_dtype, const NeedsGrad& needs) {
  std::shared_ptr<internal::VariableState> w_state = needs[1] ? w.state() : nullptr;
  std::shared_ptr<internal::VariableState> b_state = needs.size() > 2 && needs[2] ? bias.state() : nullptr;
  defer.Add([g, xd, w_state, b_state, w_dtype, b_dtype] {
    if (w_state) {
      AccumulateDeferred(w_state, {g.size(1), xd.size(1)}, w_dtype, g.device(), [&](Tensor& into, float beta) {
        ops::MatMulInto(into, g, xd, /*trans_a=*/true, /*trans_b=*/false, /*alpha=*/1.f, beta);
      });
    }
    if (b_state) {
      AccumulateDeferred(b_state, {g.size(1)}, b_dtype, g.device(),
                         [&](Tensor& into, float beta) { ops::SumRowsInto(into, g, beta); });
    }
  });
}

// The one Linear: forward with the values `wv` and `bv` (the parameters' data, or their compute copies),
// gradients in the parameters' dtypes.
Variable LinearNode(const Variable& x, const Variable& w, const Variable& bias, const Tensor& wv, const Tensor& bv,
                    bool relu) {
  const Tensor xd = x.data();
  Tensor y = relu ? ops::LinearRelu(xd, wv, bv) : ops::Linear(xd, wv, bv);
  // Two nodes, so that the parameters' gradients are final before the input's gradient is computed:
  //   y.grad_fn = "Linear": dw and db, and dy passed on unchanged to
  //   "LinearInput":        dx = dy @ w, towards x's grad_fn.
  // The engine runs a leaf's AccumulateGrad (and its hooks) as soon as its gradient is complete, so w's
  // and b's hooks fire between the two GEMMs. DDP's all_reduce of their bucket then starts after dw on
  // the GPU, not after dx: one GEMM earlier per layer, more time to overlap it. The carrier `through`
  // holds y's value only to give dy's shape; it saves nothing.
  Variable through = Record("LinearInput", y, {x}, [wv](const Tensor& g, const NeedsGrad&) -> Grads {
    return {ops::MatMul(g, wv)};  // [N,out] @ [out,in]
  });
  const DType w_dtype = w.dtype(), b_dtype = bias.defined() ? bias.dtype() : w.dtype();
  const Tensor relu_out = relu ? y : Tensor();  // LinearRelu: where the output is 0, so is dy
  BackwardFn backward = [xd, relu_out, w_dtype, b_dtype, w, bias](const Tensor& dy, const NeedsGrad& needs) -> Grads {
    const Tensor g = relu_out.defined() ? ops::ReluBackward(dy, relu_out) : dy;
    Grads grads(needs.size());
    if (WeightGradDeferral* defer = WeightGradDeferral::Active(); defer != nullptr) {  // B now, W later
      DeferWeightGrads(*defer, g, xd, w, bias, w_dtype, b_dtype, needs);
      if (needs[0]) grads[0] = g;  // to "LinearInput": the input gradient is B's
      return grads;
    }
    if (needs[1]) grads[1] = WeightGrad(g, xd, w_dtype, needs, 1);
    if (needs.size() > 2 && needs[2]) grads[2] = BiasGrad(g, b_dtype, needs, 2);
    if (needs[0]) grads[0] = g;  // to "LinearInput"
    return grads;
  };
  const char* name = relu ? "LinearRelu" : "Linear";
  if (bias.defined()) return Record(name, std::move(y), {through, w, bias}, std::move(backward));
  return Record(name, std::move(y), {through, w}, std::move(backward));
}

Tensor DataOf(const Variable& v) { return v.defined() ? v.data() : Tensor(); }

void CheckValues(const char* op, const Variable& w, const Variable& bias, const LinearValues& values) {
  TINYDDP_CHECK_OP(values.weight.defined() && values.weight.shape() == w.shape(), op, "values.weight must have the "
                   "weight's shape ", ShapeToString(w.shape()), ", got ",
                   values.weight.defined() ? ShapeToString(values.weight.shape()) : "an undefined tensor",
                   "; hint: the values stand in for the parameters (e.g. their bfloat16 compute copies)");
  TINYDDP_CHECK_OP(values.bias.defined() == bias.defined() && (!bias.defined() || values.bias.shape() == bias.shape()),
                   op, "values.bias must be defined exactly when the layer has a bias, with its shape; hint: the "
                   "values stand in for the parameters");
}

}  // namespace

Variable Linear(const Variable& x, const Variable& w, const Variable& bias) {
  return LinearNode(x, w, bias, w.data(), DataOf(bias), /*relu=*/false);
}

Variable LinearRelu(const Variable& x, const Variable& w, const Variable& bias) {
  return LinearNode(x, w, bias, w.data(), DataOf(bias), /*relu=*/true);
}

Variable Linear(const Variable& x, const Variable& w, const Variable& bias, const LinearValues& values) {
  CheckValues("Linear", w, bias, values);
  return LinearNode(x, w, bias, values.weight, values.bias, /*relu=*/false);
}

Variable LinearRelu(const Variable& x, const Variable& w, const Variable& bias, const LinearValues& values) {
  CheckValues("LinearRelu", w, bias, values);
  return LinearNode(x, w, bias, values.weight, values.bias, /*relu=*/true);
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
