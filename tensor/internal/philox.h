// Philox4x32-10, the counter-based random number generator of Salmon et al., "Parallel Random Numbers:
// As Easy as 1, 2, 3" (SC'11), and the two draws tensor/ops.h builds on: uniform and normal.
//
// Counter based means there is no state to carry: block(key, counter) is a pure function, so element i
// of a tensor is drawn from counter = offset + i with key = seed, by any thread in any order. This one
// header is compiled by g++ for the CPU kernels (cpu_random.cc) and by nvcc for the CUDA kernels, and
// both must produce the same bits. Hence every step below uses only integer arithmetic and IEEE-754
// operations that are correctly rounded on both sides (+, -, *, /, sqrt and explicit fma); logarithm
// and cosine are written out here instead of calling the platform's libm, whose last bits differ
// between glibc and CUDA. (The CPU side is built with -ffp-contract=off so that g++ never fuses a
// multiply and an add on its own; nvcc may, so every multiply-add below is an explicit fma.)
#ifndef TINYDDP_TENSOR_INTERNAL_PHILOX_H_
#define TINYDDP_TENSOR_INTERNAL_PHILOX_H_

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define TINYDDP_HD __host__ __device__ __forceinline__
#else
#define TINYDDP_HD inline
#endif

namespace tinyddp::philox {

struct Block {
  uint32_t v[4];
};

/// The raw generator: 10 rounds of Philox4x32 on `counter` under `key` (Random123's philox4x32_10).
TINYDDP_HD Block Philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule: golden ratio, sqrt(3)-1
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c[1] ^ key0, n2 = hi0 ^ c[3] ^ key1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
  return counter;
}

/// Four random words for element `index` of a stream keyed by `seed`: counter = (index, 0), key = seed.
TINYDDP_HD Block Draw(uint64_t seed, uint64_t index) {
  Block counter = {{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u}};
  return Philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// Uniform in [0, 1) with 24 random bits: exactly representable as a float, no rounding.
TINYDDP_HD float UniformFloat01(uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }

/// Uniform in [0, 1) with 53 random bits, from two words: exactly representable as a double.
TINYDDP_HD double UniformDouble01(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

// --- Deterministic log and cos for Box-Muller (double precision, ~1e-16 relative error) ----------

/// ln(x) for a normal, positive, finite x: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
/// ln(m) = 2 atanh(s) with s = (m-1)/(m+1), |s| < 0.172, summed as an odd series in s.
TINYDDP_HD double Log(double x) {
#ifdef __CUDA_ARCH__
  uint64_t bits = static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
#endif
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // mantissa as a double in [1, 2)
#ifdef __CUDA_ARCH__
  double m = __longlong_as_double(static_cast<long long>(bits));
#else
  double m;
  __builtin_memcpy(&m, &bits, sizeof(m));
#endif
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  // 2 * (1 + s2/3 + s2^2/5 + ... + s2^11/23): s2 < 0.0295, so the next term is below 1e-18.
  double poly = 1.0 / 23.0;
  for (int k = 10; k >= 0; --k) poly = fma(poly, s2, 1.0 / (2 * k + 1));
  constexpr double kLn2 = 0.6931471805599453;
  return fma(static_cast<double>(e), kLn2, 2.0 * s * poly);
}

/// cos(2 pi u) for u in [0, 1): reduce u by quarter turns (exact), then a Taylor polynomial for sin or
/// cos on |x| <= pi/4.
TINYDDP_HD double CosTwoPi(double u) {
  const double q = floor(u * 4.0 + 0.5);  // nearest quarter turn, 0..4 (u*4 is exact)
  const double r = u - q * 0.25;          // in [-1/8, 1/8], exact
  constexpr double kTwoPi = 6.283185307179586;
  const double x = r * kTwoPi;
  const double x2 = x * x;
  const int quadrant = static_cast<int>(q) & 3;
  // cos x = sum (-1)^k x^2k/(2k)!, sin x = x sum (-1)^k x^2k/(2k+1)!, k = 0..9 (next term < 1e-19).
  double c = 0, s = 0;
  double cos_coef[10], sin_coef[10];
  double f = 1.0;
  for (int k = 0; k < 10; ++k) {
    cos_coef[k] = ((k & 1) ? -1.0 : 1.0) / f;  // 1/(2k)!
    f *= (2 * k + 1);
    sin_coef[k] = ((k & 1) ? -1.0 : 1.0) / f;  // 1/(2k+1)!
    f *= (2 * k + 2);
  }
  for (int k = 9; k >= 0; --k) {
    c = fma(c, x2, cos_coef[k]);
    s = fma(s, x2, sin_coef[k]);
  }
  s *= x;
  switch (quadrant) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
  }
}

// --- The draws the ops use -----------------------------------------------------------------------

/// Element `index`'s uniform float in [low, high) (float rounding may reach `high` for tiny spans).
TINYDDP_HD float UniformF32(uint64_t seed, uint64_t index, double low, double high) {
  const Block b = Draw(seed, index);
  return fmaf(UniformFloat01(b.v[0]), static_cast<float>(high - low), static_cast<float>(low));
}

/// Element `index`'s uniform double in [low, high).
TINYDDP_HD double UniformF64(uint64_t seed, uint64_t index, double low, double high) {
  const Block b = Draw(seed, index);
  return fma(UniformDouble01(b.v[0], b.v[1]), high - low, low);
}

/// Element `index`'s standard normal, by Box-Muller on the first two words of its block:
/// z = sqrt(-2 ln u1) cos(2 pi u2) with u1 in (0, 1] (never 0, so the log is finite) and u2 in [0, 1).
/// Computed in double; the callers round once to the tensor's dtype.
TINYDDP_HD double StandardNormal(uint64_t seed, uint64_t index) {
  const Block b = Draw(seed, index);
  const double u1 = (static_cast<double>(b.v[0]) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(b.v[1]) * (1.0 / 4294967296.0);
  return sqrt(-2.0 * Log(u1)) * CosTwoPi(u2);
}

/// mean + stddev * z, in double (one rounding when the caller narrows to float or bfloat16).
TINYDDP_HD double Normal(uint64_t seed, uint64_t index, double mean, double stddev) {
  return fma(StandardNormal(seed, index), stddev, mean);
}

}  // namespace tinyddp::philox

#undef TINYDDP_HD

#endif  // TINYDDP_TENSOR_INTERNAL_PHILOX_H_
