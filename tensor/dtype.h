// Element types a Tensor can hold, their sizes and names, and bfloat16 as a plain 16-bit struct.
// Sits at the bottom of tensor/: everything else names element types through DType.
#ifndef TINYDDP_TENSOR_DTYPE_H_
#define TINYDDP_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tinyddp {

enum class DType : uint8_t { kFloat32, kFloat64, kBFloat16, kInt32, kInt64, kUInt8 };

/// Bytes per element.
size_t DTypeSize(DType dtype);
/// "float32", "float64", "bfloat16", "int32", "int64", "uint8" (PyTorch's names).
const char* DTypeName(DType dtype);
/// True for float32, float64 and bfloat16.
bool IsFloatingPoint(DType dtype);

/// bfloat16: the top 16 bits of a float32. Conversion from float rounds to nearest even (NaN stays NaN),
/// matching PyTorch's c10::BFloat16, so a bf16 round trip gives the same bits here and there.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(FromFloat(f)) {}
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  static uint16_t FromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                       // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
};

/// The DType of a C++ element type: DTypeOf<float>() == DType::kFloat32.
template <typename T>
constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<float>() { return DType::kFloat32; }
template <> constexpr DType DTypeOf<double>() { return DType::kFloat64; }
template <> constexpr DType DTypeOf<BFloat16>() { return DType::kBFloat16; }
template <> constexpr DType DTypeOf<int32_t>() { return DType::kInt32; }
template <> constexpr DType DTypeOf<int64_t>() { return DType::kInt64; }
template <> constexpr DType DTypeOf<uint8_t>() { return DType::kUInt8; }

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_DTYPE_H_
