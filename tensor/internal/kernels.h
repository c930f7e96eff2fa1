// Internal: the backends behind tensor/ops.h. Only ops.cc and the backends include this.
//
// One kernel list (kernel_list.inc), three implementations:
//   cpu::       float32 and float64 on the CPU (cpu_*.cc); the data movers (Fill, Copy, Cast, gathers,
//               random init) handle every dtype
//   cpu_bf16::  any call on the CPU that involves a bfloat16 tensor (cpu_bf16.cc): widen to float32, run
//               the cpu:: kernel, round the result to nearest even, as the GPU does at its stores
//   cuda::      every dtype on the GPU (cuda_*.cu; cuda_stub.cc where there is no CUDA)
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

namespace cpu_bf16 {
#include "tensor/internal/kernel_list.inc"
}  // namespace cpu_bf16

namespace cuda {
#include "tensor/internal/kernel_list.inc"
}  // namespace cuda

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_INTERNAL_KERNELS_H_
