// Helpers for the CPU op tests: random tensors from std::mt19937 (independent of our own Philox, so a
// bug there cannot hide one here), tensors as vectors of double, and elementwise comparison.
#ifndef TINYDDP_TENSOR_TESTING_OPS_TEST_UTIL_H_
#define TINYDDP_TENSOR_TESTING_OPS_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace tinyddp::testing {

/// Uniform values in [low, high) of `dtype` (float32 or float64), reproducible from `seed`.
inline Tensor RandomTensor(Shape shape, DType dtype, uint32_t seed, double low = -1.0, double high = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(low, high);
  const int64_t n = NumElements(shape);
  if (dtype == DType::kFloat64) {
    std::vector<double> v(n);
    for (auto& x : v) x = dist(gen);
    return Tensor::FromVector(v, shape);
  }
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(gen));
  return Tensor::FromVector(v, shape);
}

/// The elements of a float32/float64/int64 tensor as doubles.
inline std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> out;
  switch (t.dtype()) {
    case DType::kFloat32:
      for (float x : t.ToVector<float>()) out.push_back(x);
      break;
    case DType::kFloat64: out = t.ToVector<double>(); break;
    case DType::kInt64:
      for (int64_t x : t.ToVector<int64_t>()) out.push_back(static_cast<double>(x));
      break;
    default: ADD_FAILURE() << "AsDoubles: unsupported dtype " << DTypeName(t.dtype());
  }
  return out;
}

/// |got[i] - want[i]| <= atol + rtol * |want[i]| for every i; reports the first few misses.
inline void ExpectAllNear(const std::vector<double>& got, const std::vector<double>& want, double atol,
                          double rtol = 0.0, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (++misses <= 5) ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " elements differ";
}

inline void ExpectAllNear(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol,
                          const ::testing::Message& what) {
  ExpectAllNear(got, want, atol, rtol, what.GetString());
}

/// Float tolerance for a sum of k terms of size ~1: a few ulps of float per term.
inline double Tol(DType dtype, int64_t k = 1) {
  return dtype == DType::kFloat64 ? 1e-12 * static_cast<double>(k) : 2e-6 * static_cast<double>(k);
}

}  // namespace tinyddp::testing

#endif  // TINYDDP_TENSOR_TESTING_OPS_TEST_UTIL_H_
