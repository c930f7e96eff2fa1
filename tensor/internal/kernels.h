// Internal: the two backends behind tensor/ops.h. Only ops.cc and the backends include this.
#ifndef TINYDDP_TENSOR_INTERNAL_KERNELS_H_
#define TINYDDP_TENSOR_INTERNAL_KERNELS_H_

#include "absl/types/span.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace tinyddp {

enum class BinaryKind { kAdd, kSub, kMul, kDiv };

namespace cpu {
#include "tensor/internal/kernel_list.inc"
}  // namespace cpu

namespace cuda {
#include "tensor/internal/kernel_list.inc"
}  // namespace cuda

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_INTERNAL_KERNELS_H_
