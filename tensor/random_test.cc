// Philox4x32-10 and the random initialisers: Random123's known-answer vectors, the pure-function
// property (element i depends only on seed and offset + i), the moments of 10^6 draws, and the
// hand-written log/cos that make CPU and CUDA agree against the C library.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/internal/philox.h"
#include "tensor/ops.h"

namespace tinyddp {
namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  // tests/kat_vectors of Random123: counter (4 words), key (2 words) -> output (4 words).
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    philox::Block c = {{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}};
    const philox::Block r = philox::Philox4x32_10(c, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << "word " << i;
  }
}

TEST(Philox, HandWrittenLogAndCosAgreeWithLibmToAFewUlps) {
  for (int i = 1; i <= 100000; ++i) {
    const double u = i / 100000.0 - 0.5 / 100000.0;  // (0, 1)
    EXPECT_NEAR(philox::Log(u), std::log(u), 1e-15 * std::fabs(std::log(u)) + 2e-16) << u;
    EXPECT_NEAR(philox::CosTwoPi(u), std::cos(2 * M_PI * u), 2e-15) << u;
  }
  EXPECT_EQ(philox::Log(1.0), 0.0);
  EXPECT_NEAR(philox::Log(std::ldexp(1.0, -32)), -32 * std::log(2.0), 1e-14);
  EXPECT_EQ(philox::CosTwoPi(0.0), 1.0);
  EXPECT_EQ(philox::CosTwoPi(0.5), -1.0);
}

std::vector<double> UniformDraws(DType dt, int64_t n, uint64_t seed, uint64_t offset, double lo = -2, double hi = 3) {
  Tensor t = Tensor::Empty({n}, dt);
  ops::UniformInit(t, lo, hi, seed, offset);
  return std::vector<double>(ops::Cast(t, DType::kFloat64).ToVector<double>());
}

std::vector<double> NormalDraws(DType dt, int64_t n, uint64_t seed, uint64_t offset, double mean = 1.5,
                                double stddev = 0.5) {
  Tensor t = Tensor::Empty({n}, dt);
  ops::NormalInit(t, mean, stddev, seed, offset);
  return std::vector<double>(ops::Cast(t, DType::kFloat64).ToVector<double>());
}

TEST(RandomInit, SameSeedSameNumbersOtherSeedOtherNumbers) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    EXPECT_EQ(UniformDraws(dt, 1001, 7, 0), UniformDraws(dt, 1001, 7, 0));
    EXPECT_EQ(NormalDraws(dt, 1001, 7, 0), NormalDraws(dt, 1001, 7, 0));
    EXPECT_NE(UniformDraws(dt, 1001, 7, 0), UniformDraws(dt, 1001, 8, 0));
    EXPECT_NE(NormalDraws(dt, 1001, 7, 0), NormalDraws(dt, 1001, 1ull << 40, 0));  // high key word counts
  }
}

TEST(RandomInit, OffsetKGivesElementsKOnwardOfOffsetZero) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    for (uint64_t k : {1ull, 17ull, 999ull}) {
      const auto u0 = UniformDraws(dt, 1000 + k, 3, 0), uk = UniformDraws(dt, 1000, 3, k);
      EXPECT_EQ(uk, std::vector<double>(u0.begin() + k, u0.end())) << DTypeName(dt) << " k=" << k;
      const auto n0 = NormalDraws(dt, 1000 + k, 3, 0), nk = NormalDraws(dt, 1000, 3, k);
      EXPECT_EQ(nk, std::vector<double>(n0.begin() + k, n0.end())) << DTypeName(dt) << " k=" << k;
    }
  }
  // Counters past 2^32 use the counter's second word.
  const auto far = UniformDraws(DType::kFloat32, 4, 3, (1ull << 32) + 5);
  EXPECT_NE(far, UniformDraws(DType::kFloat32, 4, 3, 5));
}

TEST(RandomInit, ElementIOfARowsViewIsDrawnFromItsOwnOffset) {
  // Initialising rows [3, 7) of a matrix with offset 3*cols equals rows 3..6 of initialising the whole.
  Tensor whole = Tensor::Empty({10, 13});
  ops::UniformInit(whole, -1, 1, 11, 0);
  Tensor part = Tensor::Empty({4, 13});
  ops::UniformInit(part, -1, 1, 11, 3 * 13);
  EXPECT_EQ(part.ToVector<float>(), whole.Rows(3, 7).ToVector<float>());
}

struct Moments {
  double mean = 0, var = 0, skew = 0, kurt = 0, min = INFINITY, max = -INFINITY;
};
Moments ComputeMoments(const std::vector<double>& x) {
  Moments m;
  for (double v : x) {
    m.mean += v;
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  m.mean /= x.size();
  for (double v : x) {
    const double d = v - m.mean;
    m.var += d * d;
    m.skew += d * d * d;
    m.kurt += d * d * d * d;
  }
  m.var /= x.size();
  m.skew /= x.size() * std::pow(m.var, 1.5);
  m.kurt /= x.size() * m.var * m.var;
  return m;
}

TEST(RandomInit, UniformHasTheMomentsOfUniformOnAMillionDraws) {
  constexpr int64_t kN = 1000000;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Moments m = ComputeMoments(UniformDraws(dt, kN, 2024, 0, -2, 3));
    // U(-2, 3): mean 0.5, variance 25/12; the standard error of the mean is sqrt(25/12/1e6) = 0.0014.
    EXPECT_NEAR(m.mean, 0.5, 5 * 0.00145);
    EXPECT_NEAR(m.var, 25.0 / 12, 0.01);
    EXPECT_NEAR(m.skew, 0, 0.01);
    EXPECT_NEAR(m.kurt, 1.8, 0.01);  // uniform's kurtosis is 9/5
    EXPECT_GE(m.min, -2.0);
    EXPECT_LT(m.max, 3.0);
    EXPECT_LT(m.min, -1.999);
    EXPECT_GT(m.max, 2.999);
  }
}

TEST(RandomInit, NormalHasTheMomentsOfNormalOnAMillionDraws) {
  constexpr int64_t kN = 1000000;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const std::vector<double> x = NormalDraws(dt, kN, 99, 0, 1.5, 0.5);
    const Moments m = ComputeMoments(x);
    EXPECT_NEAR(m.mean, 1.5, 5 * 0.5 / 1000);
    EXPECT_NEAR(std::sqrt(m.var), 0.5, 0.002);
    EXPECT_NEAR(m.skew, 0, 0.015);
    EXPECT_NEAR(m.kurt, 3, 0.03);
    int64_t within_one = 0, beyond_three = 0;
    for (double v : x) {
      within_one += std::fabs(v - 1.5) < 0.5;
      beyond_three += std::fabs(v - 1.5) > 1.5;
    }
    EXPECT_NEAR(within_one / double(kN), 0.682689, 0.003);
    EXPECT_NEAR(beyond_three / double(kN), 0.0026998, 0.0004);
    // The tails reach as far as 2^32 draws allow (u1 >= 2^-32 bounds |z| by sqrt(64 ln 2) = 6.66).
    EXPECT_LT(m.max, 1.5 + 0.5 * 6.7);
  }
}

TEST(RandomInitDeathTest, IntegerTargetsAreRejected) {
  Tensor t = Tensor::Empty({3}, DType::kInt32);
  EXPECT_DEATH(ops::UniformInit(t, 0, 1, 1), "UniformInit: dst must be floating point, got \\[3\\] int32");
}

}  // namespace
}  // namespace tinyddp
