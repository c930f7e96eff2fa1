// Broadcasting a reduced gradient back (autograd/internal/broadcast.h). tensor/ops.h has no general
// broadcast, so view the target as [outer, n, inner] (n the summed dim) and use what it has:
//   outer == 1  (a sum over dim 0, the case on the training path): zeros [n, inner] + g as a row vector
//   inner == 1  (a sum over the last dim): the outer product g [outer, 1] @ ones [1, n]
//   otherwise   one AddRowVector per block of the outer dims (3-D and up only; not a hot path)
// Every case copies g's values exactly: adding to zeros, or a product with 1 and nothing to accumulate
// (matmul is plain float32/float64 here, no TF32).
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
  if (inner == 1) return ops::MatMul(rows, Filled({1, n}, 1.0, g)).View(shape);
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
