// Reductions with their backwards (autograd/functions.h): a sum's gradient is the incoming gradient
// repeated over everything that was summed; a mean's is that divided by the count.
#include <utility>

#include "autograd/functions.h"
#include "autograd/internal/broadcast.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

int64_t NormalizedDim(const Variable& x, int64_t dim) { return dim < 0 ? dim + x.data().dim() : dim; }

}  // namespace

Variable Sum(const Variable& x) {
  const Shape shape = x.shape();
  return Record("Sum", ops::Sum(x.data()), {x}, [shape](const Tensor& g, const NeedsGrad&) -> Grads {
    return {internal::BroadcastScalar(g, shape)};
  });
}

Variable Sum(const Variable& x, int64_t dim, bool keepdim) {
  Tensor y = ops::Sum(x.data(), dim, keepdim);  // checks dim
  const Shape shape = x.shape();
  const int64_t d = NormalizedDim(x, dim);
  return Record("Sum", std::move(y), {x}, [shape, d](const Tensor& g, const NeedsGrad&) -> Grads {
    return {internal::BroadcastAlongDim(g, shape, d)};
  });
}

Variable Mean(const Variable& x) {
  const Shape shape = x.shape();
  const double inv_n = 1.0 / static_cast<double>(x.numel());
  return Record("Mean", ops::Mean(x.data()), {x}, [shape, inv_n](const Tensor& g, const NeedsGrad&) -> Grads {
    Tensor gx = internal::BroadcastScalar(g, shape);
    ops::ScaleInPlace(gx, inv_n);
    return {gx};
  });
}

Variable Mean(const Variable& x, int64_t dim, bool keepdim) {
  Tensor y = ops::Mean(x.data(), dim, keepdim);  // checks dim
  const Shape shape = x.shape();
  const int64_t d = NormalizedDim(x, dim);
  const double inv_n = 1.0 / static_cast<double>(shape[d]);
  return Record("Mean", std::move(y), {x}, [shape, d, inv_n](const Tensor& g, const NeedsGrad&) -> Grads {
    Tensor gx = internal::BroadcastAlongDim(g, shape, d);
    ops::ScaleInPlace(gx, inv_n);
    return {gx};
  });
}

}  // namespace tinyddp::autograd
