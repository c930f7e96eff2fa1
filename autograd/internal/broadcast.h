// Internal to autograd/: spreading a reduced gradient back over the shape it was reduced from, the
// backward of every reduction (Sum, Mean, MseLoss). Built from tensor ops only, without synchronising
// with the GPU (a scalar gradient stays on the device; nothing calls Item()).
#ifndef TINYDDP_AUTOGRAD_INTERNAL_BROADCAST_H_
#define TINYDDP_AUTOGRAD_INTERNAL_BROADCAST_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace tinyddp::autograd::internal {

/// A new tensor of `shape` with like's dtype and device, every element `value` (ops::Fill: a kernel on
/// the current stream, unlike Tensor::Full, which copies from the host).
Tensor Filled(const Shape& shape, double value, const Tensor& like);

/// A tensor of `shape` whose every element is the single element of `scalar` (numel 1).
Tensor BroadcastScalar(const Tensor& scalar, const Shape& shape);

/// The inverse of summing `dim` of a tensor of `shape`: g holds the sums (shape without `dim`, or with
/// it as 1), the result repeats them along `dim`. Precondition: 0 <= dim < shape.size().
Tensor BroadcastAlongDim(const Tensor& g, const Shape& shape, int64_t dim);

}  // namespace tinyddp::autograd::internal

#endif  // TINYDDP_AUTOGRAD_INTERNAL_BROADCAST_H_
