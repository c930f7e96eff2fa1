// IEEE half precision (binary16: 1 sign, 5 exponent, 10 mantissa bits) for exercise 2: float to half
// rounds to nearest even, as CUDA's __float2half and PyTorch's .half() do; tensor/ has no float16 dtype,
// so the halves travel as raw 16-bit words. Given, not part of the exercise.
#ifndef TINYDDP_TESTS_EXERCISES_COMPRESS_HOOK_FP16_H_
#define TINYDDP_TESTS_EXERCISES_COMPRESS_HOOK_FP16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tinyddp::exercises {

/// The half nearest to `f` (ties to even); beyond +-65504 it becomes infinity, NaN stays NaN.
inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN, infinity
  if (x >= 0x477ff000u) return sign | 0x7c00;                               // rounds past 65504
  if (x < 0x38800000u) {  // below 2^-14, half's smallest normal: a multiple of 2^-24, or zero
    float magnitude;
    std::memcpy(&magnitude, &x, sizeof(magnitude));
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));  // ties to even
  }
  uint32_t h = (x >> 13) - (112u << 10);  // exponent rebiased from 127 to 15, mantissa cut to 10 bits
  const uint32_t dropped = x & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1u))) ++h;  // a carry may bump the exponent: fine
  return sign | static_cast<uint16_t>(h);
}

/// The float equal to half `h` (every half is exactly a float).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  const uint32_t x =
      exponent == 31 ? sign | 0x7f800000u | (mantissa << 13) : sign | ((exponent + 112u) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_COMPRESS_HOOK_FP16_H_
