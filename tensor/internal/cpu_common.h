// Shared by the CPU kernels (tensor/internal/cpu_*.cc): dispatch on a tensor's dtype to a typed
// lambda, and the double-precision accumulator type. Internal to the tensor library.
#ifndef TINYDDP_TENSOR_INTERNAL_CPU_COMMON_H_
#define TINYDDP_TENSOR_INTERNAL_CPU_COMMON_H_

#include <cstdint>

#include "tensor/dtype.h"
#include "base/check.h"
#include "tensor/tensor.h"

namespace tinyddp::cpu {

/// Calls fn(T{}) with T = float or double, matching `dtype`; any other dtype stops with a message naming
/// `op` (ops.cc rejects those earlier, so reaching it means a backend bug).
template <typename Fn>
void DispatchFloat(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(float{}); return;
    case DType::kFloat64: fn(double{}); return;
    default: break;
  }
  TINYDDP_CHECK_OP(false, op, "the CPU kernel handles float32 and float64, not ", DTypeName(dtype));
}

/// Calls fn(T{}) for each of the six element types.
template <typename Fn>
void DispatchAll(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(float{}); return;
    case DType::kFloat64: fn(double{}); return;
    case DType::kBFloat16: fn(BFloat16{}); return;
    case DType::kInt32: fn(int32_t{}); return;
    case DType::kInt64: fn(int64_t{}); return;
    case DType::kUInt8: fn(uint8_t{}); return;
  }
}

/// Element type converted to double and back (BFloat16 has only explicit float conversions).
template <typename T>
inline double ToDouble(T v) {
  return static_cast<double>(v);
}
template <>
inline double ToDouble(BFloat16 v) {
  return static_cast<float>(v);
}
template <typename T>
inline T FromDouble(double v) {
  return static_cast<T>(v);
}
template <>
inline BFloat16 FromDouble(double v) {
  return BFloat16(static_cast<float>(v));
}
// Through int64, so -1 becomes 255 as in PyTorch rather than undefined behaviour.
template <>
inline uint8_t FromDouble(double v) {
  return static_cast<uint8_t>(static_cast<int64_t>(v));
}

}  // namespace tinyddp::cpu

#endif  // TINYDDP_TENSOR_INTERNAL_CPU_COMMON_H_
