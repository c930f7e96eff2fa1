// Helpers for the bfloat16 op tests (CPU sweep and CUDA-vs-CPU): random inputs that bfloat16 holds
// exactly, so a bfloat16 op and the float32 op see the same numbers, and the check that a bfloat16
// result is the float32 result correctly rounded.
#ifndef TINYDDP_TENSOR_TESTING_BF16_TEST_UTIL_H_
#define TINYDDP_TENSOR_TESTING_BF16_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace tinyddp::testing {

/// Uniform values in [low, high) rounded to bfloat16, as a float32 tensor (so they are exact in both).
inline Tensor RandomBf16Values(Shape shape, uint32_t seed, double low = -1.0, double high = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<float> v(NumElements(shape));
  for (float& x : v) x = static_cast<float>(BFloat16(static_cast<float>(dist(gen))));
  return Tensor::FromVector(v, shape);
}

/// The elements of a float32 or bfloat16 CPU tensor as floats.
inline std::vector<float> Floats(const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t.ToVector<float>();
  std::vector<float> out;
  EXPECT_EQ(t.dtype(), DType::kBFloat16) << "Floats: float32 or bfloat16 only";
  if (t.dtype() != DType::kBFloat16) return out;
  for (BFloat16 b : t.ToVector<BFloat16>()) out.push_back(static_cast<float>(b));
  return out;
}

/// got (bfloat16) is want (the float32 op's result) correctly rounded: exactly BFloat16(want), the
/// nearest bfloat16 with ties to even (NaN matching any NaN). A result one ulp off fails.
inline void ExpectCorrectlyRounded(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::kBFloat16) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = Floats(got), w = Floats(want);
  int64_t misses = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (BFloat16(g[i]).bits == BFloat16(w[i]).bits) continue;  // g is a bfloat16 value: BFloat16(g) is exact
    if (++misses <= 5) {
      ADD_FAILURE() << what << " element " << i << ": bfloat16 " << g[i] << ", float32 " << w[i] << " rounds to "
                    << static_cast<float>(BFloat16(w[i]));
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << g.size() << " elements are not float32 rounded";
}

}  // namespace tinyddp::testing

#endif  // TINYDDP_TENSOR_TESTING_BF16_TEST_UTIL_H_
