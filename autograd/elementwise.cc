// Elementwise ops with their backwards (autograd/functions.h): the chain rule one element at a time.
#include <utility>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {

Variable Add(const Variable& a, const Variable& b) {
  // d(a+b) = da + db: both inputs receive the incoming gradient itself (the engine notices the sharing
  // and copies before anything could modify one of them in place).
  return Record("Add", ops::Add(a.data(), b.data()), {a, b}, [](const Tensor& g, const NeedsGrad& needs) {
    Grads grads(2);
    if (needs[0]) grads[0] = g;
    if (needs[1]) grads[1] = g;
    return grads;
  });
}

Variable Sub(const Variable& a, const Variable& b) {
  return Record("Sub", ops::Sub(a.data(), b.data()), {a, b}, [](const Tensor& g, const NeedsGrad& needs) {
    Grads grads(2);
    if (needs[0]) grads[0] = g;
    if (needs[1]) grads[1] = ops::Scale(g, -1.0);
    return grads;
  });
}

Variable Mul(const Variable& a, const Variable& b) {
  const Tensor ad = a.data(), bd = b.data();
  return Record("Mul", ops::Mul(ad, bd), {a, b}, [ad, bd](const Tensor& g, const NeedsGrad& needs) {
    Grads grads(2);
    if (needs[0]) grads[0] = ops::Mul(g, bd);
    if (needs[1]) grads[1] = ops::Mul(g, ad);
    return grads;
  });
}

Variable Div(const Variable& a, const Variable& b) {
  const Tensor bd = b.data();
  Tensor y = ops::Div(a.data(), bd);
  return Record("Div", y, {a, b}, [bd, y](const Tensor& g, const NeedsGrad& needs) {
    // y = a / b: dy/da = 1/b, dy/db = -a/b^2 = -(1/b) * y.
    Grads grads(2);
    Tensor g_over_b = ops::Div(g, bd);
    if (needs[1]) grads[1] = ops::Scale(ops::Mul(g_over_b, y), -1.0);
    if (needs[0]) grads[0] = std::move(g_over_b);
    return grads;
  });
}

Variable Scale(const Variable& a, double s) {
  return Record("Scale", ops::Scale(a.data(), s), {a}, [s](const Tensor& g, const NeedsGrad&) -> Grads {
    return {ops::Scale(g, s)};
  });
}

Variable AddRowVector(const Variable& x, const Variable& row) {
  // The row was added to every row of x, so its gradient sums the incoming gradient over the rows.
  return Record("AddRowVector", ops::AddRowVector(x.data(), row.data()), {x, row},
                [](const Tensor& g, const NeedsGrad& needs) {
                  Grads grads(2);
                  if (needs[0]) grads[0] = g;
                  if (needs[1]) grads[1] = ops::Sum(g, 0);
                  return grads;
                });
}

Variable View(const Variable& x, Shape shape) {
  const Shape in_shape = x.shape();
  return Record("View", x.data().View(std::move(shape)), {x}, [in_shape](const Tensor& g, const NeedsGrad&) -> Grads {
    return {g.View(in_shape)};
  });
}

Variable Cast(const Variable& x, DType dtype) {
  // A cast is the identity on values (up to rounding), so its gradient is the incoming one, cast back.
  const DType from = x.dtype();
  return Record("Cast", ops::Cast(x.data(), dtype), {x}, [from](const Tensor& g, const NeedsGrad&) -> Grads {
    return {ops::Cast(g, from)};
  });
}

}  // namespace tinyddp::autograd
