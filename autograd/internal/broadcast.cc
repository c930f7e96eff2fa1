// Broadcasting a reduced gradient back (autograd/internal/broadcast.h). tensor/ops.h broadcasts in one
// direction only, a row vector over the rows of a matrix (AddRowVector), so every case is phrased as
// that: view the target as [outer, n, inner]; each of the `outer` blocks [n, inner] is a zero block plus
// one row of g. One launch when outer == 1 (sums over dim 0, the case on the training path); a loop
// over the blocks otherwise. AddRowVector adds to exact zeros, so the values are copied exactly.
#include "autograd/internal/broadcast.h"

#include "tensor/ops.h"

namespace tinyddp::autograd::internal {

Tensor Filled(const Shape& shape, double value, const Tensor& like) {
  Tensor t = Tensor::Empty(shape, like.dtype(), like.device());
  ops::Fill(t, value);
  return t;
}

Tensor BroadcastScalar(const Tensor& scalar, const Shape& shape) {
  const int64_t n = NumElements(shape);
  return ops::AddRowVector(Filled({n, 1}, 0.0, scalar), scalar.View({1})).View(shape);
}

Tensor BroadcastAlongDim(const Tensor& g, const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (int64_t i = dim + 1; i < static_cast<int64_t>(shape.size()); ++i) inner *= shape[i];
  const int64_t n = shape[dim];
  const Tensor rows = g.View({outer, inner});
  const Tensor zeros = Filled({n, inner}, 0.0, g);
  if (outer == 1) return ops::AddRowVector(zeros, rows.View({inner})).View(shape);
  Tensor out = Tensor::Empty({outer * n, inner}, g.dtype(), g.device());
  for (int64_t o = 0; o < outer; ++o) {
    Tensor block = out.Rows(o * n, (o + 1) * n);
    ops::CopyInto(block, ops::AddRowVector(zeros, rows.Rows(o, o + 1).View({inner})));
  }
  return out.View(shape);
}

}  // namespace tinyddp::autograd::internal
