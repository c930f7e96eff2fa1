// Launches the smoke kernel on random, odd-sized input and checks every element against the CPU.
#include "tests/smoke/saxpy.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace tinyddp::smoke {
namespace {

TEST(CudaSmoke, SaxpyKernelMatchesCpuOnOddSize) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const int n = (1 << 20) + 3;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = dist(gen);
    y[i] = dist(gen);
  }
  std::vector<float> out = y;
  ASSERT_EQ(Saxpy(2.5f, x, out), "");
  // The GPU contracts a * x + y into one fused multiply-add (one rounding), so the exact reference is fmaf.
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], std::fma(2.5f, x[i], y[i])) << "element " << i;
}

}  // namespace
}  // namespace tinyddp::smoke
