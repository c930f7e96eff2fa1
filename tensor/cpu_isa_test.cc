// The instruction-set variants of the hot CPU kernels (tensor/cpu_isa.h): how the variant is chosen, and
// every variant this CPU runs against the sse2 build on random inputs of odd lengths at odd offsets
// (so vector loops run their remainders and unaligned loads). Elementwise kernels and optimizer steps
// must agree bit for bit; a GEMM to rounding, and each variant also against a double-precision reference.
// Built twice: cpu_isa_test runs whatever this CPU picks, cpu_isa_test_forced_sse2 with TINYDDP_CPU_ISA=sse2.
#include "tensor/cpu_isa.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/internal/cpu_isa_kernels.h"

namespace tinyddp {
namespace {

using cpu::IsaKernels;
using cpu::IsaKernelsFor;
using cpu::IsaKernelTable;

// --- Choosing the variant -------------------------------------------------------------------------

TEST(CpuIsa, ParsesTheThreeVariantNamesAndRejectsAnythingElse) {
  EXPECT_EQ(*ParseCpuIsa("sse2"), CpuIsa::kSse2);
  EXPECT_EQ(*ParseCpuIsa("avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(*ParseCpuIsa("avx512"), CpuIsa::kAvx512);
  for (const char* bad : {"AVX2", "avx", "x86-64-v3", "", "avx2 "}) {
    const absl::StatusOr<CpuIsa> isa = ParseCpuIsa(bad);
    ASSERT_FALSE(isa.ok()) << bad;
    EXPECT_NE(isa.status().message().find("sse2, avx2 and avx512"), absl::string_view::npos) << isa.status();
  }
}

TEST(CpuIsa, TheEnvironmentCapsTheChoiceButNeverRaisesIt) {
  EXPECT_EQ(*ChooseCpuIsa(CpuIsa::kAvx512, nullptr), CpuIsa::kAvx512);
  EXPECT_EQ(*ChooseCpuIsa(CpuIsa::kAvx2, ""), CpuIsa::kAvx2);
  EXPECT_EQ(*ChooseCpuIsa(CpuIsa::kAvx512, "avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(*ChooseCpuIsa(CpuIsa::kAvx2, "sse2"), CpuIsa::kSse2);
  EXPECT_EQ(*ChooseCpuIsa(CpuIsa::kAvx2, "avx512"), CpuIsa::kAvx2);  // asking for more than the CPU runs
  EXPECT_EQ(*ChooseCpuIsa(CpuIsa::kSse2, "avx2"), CpuIsa::kSse2);
  const absl::StatusOr<CpuIsa> bad = ChooseCpuIsa(CpuIsa::kAvx2, "avx3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TINYDDP_CPU_ISA"), absl::string_view::npos) << bad.status();
}

TEST(CpuIsa, TheActiveVariantIsTheDetectedOneCappedByTinyddpCpuIsa) {
  const char* cap = std::getenv("TINYDDP_CPU_ISA");
  EXPECT_EQ(ActiveCpuIsa(), *ChooseCpuIsa(DetectedCpuIsa(), cap));
  EXPECT_STREQ(cpu::ActiveIsaKernelTable().name, CpuIsaName(ActiveCpuIsa()));
  const std::string summary = CpuIsaSummary();
  EXPECT_NE(summary.find(CpuIsaName(ActiveCpuIsa())), std::string::npos) << summary;
  std::printf("%s; TINYDDP_CPU_ISA=%s\n", summary.c_str(), cap == nullptr ? "(unset)" : cap);
}

TEST(CpuIsaDeathTest, AMalformedTinyddpCpuIsaStopsTheProgramNamingTheChoices) {
  // "threadsafe" re-executes this binary for the statement, so ActiveCpuIsa() decides afresh there.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TINYDDP_CPU_ISA", "avx3", /*overwrite=*/1);
        ActiveCpuIsa();
      },
      testing::ExitedWithCode(2),
      "TINYDDP_CPU_ISA: unknown CPU instruction set 'avx3'; the choices are sse2, avx2 and avx512");
}

TEST(CpuIsa, OnlyVariantsThisCpuRunsAreOffered) {
  for (CpuIsa isa : {CpuIsa::kSse2, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    const IsaKernelTable* table = IsaKernelsFor(isa);
    if (isa <= DetectedCpuIsa()) {
      ASSERT_NE(table, nullptr) << CpuIsaName(isa);
      EXPECT_STREQ(table->name, CpuIsaName(isa));
    } else {
      EXPECT_EQ(table, nullptr) << CpuIsaName(isa) << " offered on a CPU that runs only up to "
                                << CpuIsaName(DetectedCpuIsa());
    }
  }
}

// --- Every variant against sse2 -------------------------------------------------------------------

// The variants above sse2 that this CPU runs (the ones worth comparing), printed once.
std::vector<const IsaKernelTable*> WiderVariants() {
  std::vector<const IsaKernelTable*> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (const IsaKernelTable* t = IsaKernelsFor(isa)) out.push_back(t);
  }
  static bool printed = false;
  if (!printed) {
    printed = true;
    std::printf("comparing against sse2:");
    for (const IsaKernelTable* t : out) std::printf(" %s", t->name);
    std::printf("%s\n", out.empty() ? " (none: this CPU runs only sse2)" : "");
  }
  return out;
}

template <typename T>
const IsaKernels<T>& Of(const IsaKernelTable& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.f32;
  } else {
    return t.f64;
  }
}

// Random values in [-2, 2] with some exact zeros (ReLU's boundary) mixed in.
template <typename T>
std::vector<T> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 17 == 3 ? T(0) : static_cast<T>(u(rng));
  return v;
}

// Lengths that leave remainders for every vector width, and an offset of one element so loads are unaligned.
const int64_t kLengths[] = {1, 7, 33, 1003, 4099};
constexpr int64_t kOffset = 1;

template <typename T>
void ExpectBitIdentical(const std::vector<T>& want, const std::vector<T>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0) {
      FAIL() << what << ": element " << i << " of " << want.size() << " differs from sse2: " << got[i] << " vs "
             << want[i];
    }
  }
}

// Runs `kernel(kernels, a, b, out, n)` with sse2's kernels and with each wider variant's, on the same
// inputs, and requires the outputs to be bit-identical.
template <typename T, typename Kernel>
void CompareElementwise(const char* what, Kernel kernel) {
  const IsaKernelTable& base = *IsaKernelsFor(CpuIsa::kSse2);
  for (int64_t n : kLengths) {
    const std::vector<T> a = Random<T>(n + kOffset, 11 + n), b = Random<T>(n + kOffset, 23 + n);
    std::vector<T> want(n + kOffset, T(7));
    kernel(Of<T>(base), a.data() + kOffset, b.data() + kOffset, want.data() + kOffset, n);
    for (const IsaKernelTable* t : WiderVariants()) {
      SCOPED_TRACE(testing::Message() << t->name << " n=" << n << " " << what);
      std::vector<T> got(n + kOffset, T(7));
      kernel(Of<T>(*t), a.data() + kOffset, b.data() + kOffset, got.data() + kOffset, n);
      ExpectBitIdentical(want, got, what);
    }
  }
}

template <typename T>
void CompareAllElementwise() {
  using K = IsaKernels<T>;
  CompareElementwise<T>("add", [](const K& k, const T* a, const T* b, T* o, int64_t n) { k.add(a, b, o, n); });
  CompareElementwise<T>("sub", [](const K& k, const T* a, const T* b, T* o, int64_t n) { k.sub(a, b, o, n); });
  CompareElementwise<T>("mul", [](const K& k, const T* a, const T* b, T* o, int64_t n) { k.mul(a, b, o, n); });
  CompareElementwise<T>("div", [](const K& k, const T* a, const T* b, T* o, int64_t n) { k.div(a, b, o, n); });
  CompareElementwise<T>("axpby", [](const K& k, const T* a, const T* b, T* o, int64_t n) {
    k.axpby(T(0.3), a, T(-1.7), b, o, n);
  });
  CompareElementwise<T>("axpby(alpha=1)", [](const K& k, const T* a, const T* b, T* o, int64_t n) {
    k.axpby(T(1), a, T(0.1), b, o, n);
  });
  CompareElementwise<T>("axpby(b=null)", [](const K& k, const T* a, const T*, T* o, int64_t n) {
    k.axpby(T(-0.7), a, T(0), nullptr, o, n);
  });
  CompareElementwise<T>("axpby in place", [](const K& k, const T* a, const T* b, T* o, int64_t n) {
    std::memcpy(o, a, n * sizeof(T));
    k.axpby(T(1), o, T(0.25), b, o, n);  // AddInto: out aliases a
  });
  CompareElementwise<T>("add_row_vector", [](const K& k, const T* a, const T* b, T* o, int64_t n) {
    const int64_t rows = n >= 33 ? n / 11 : 1;  // [3, 11], [91, 11], [372, 11]; the tail stays untouched
    k.add_row_vector(a, b, o, rows, n / rows);
  });
  CompareElementwise<T>("relu", [](const K& k, const T* a, const T*, T* o, int64_t n) { k.relu(a, o, n); });
  CompareElementwise<T>("relu_backward", [](const K& k, const T* a, const T* b, T* o, int64_t n) {
    k.relu_backward(a, b, o, n);
  });
  CompareElementwise<T>("gelu", [](const K& k, const T* a, const T*, T* o, int64_t n) { k.gelu(a, o, n); });
  CompareElementwise<T>("gelu_backward", [](const K& k, const T* a, const T* b, T* o, int64_t n) {
    k.gelu_backward(a, b, o, n);
  });
}

TEST(CpuIsaKernels, ElementwiseKernelsOfEveryVariantAreBitIdenticalToSse2) {
  CompareAllElementwise<float>();
  CompareAllElementwise<double>();
}

// One optimizer step per configuration on copies of the same state; every variant must leave the
// parameters and the optimizer state bit-identical to sse2's.
template <typename T>
void CompareOptimizers() {
  const IsaKernelTable& base = *IsaKernelsFor(CpuIsa::kSse2);
  struct Sgd {
    double momentum, wd;
    bool first, nesterov;
  };
  for (int64_t n : kLengths) {
    const std::vector<T> p0 = Random<T>(n, 5 + n), g = Random<T>(n, 6 + n), buf0 = Random<T>(n, 7 + n);
    for (const Sgd& c : {Sgd{0, 0, false, false}, Sgd{0.9, 0, true, false}, Sgd{0.9, 1e-2, false, false},
                         Sgd{0.9, 1e-2, false, true}}) {
      cpu::SgdScalars<T> s{T(0.01), T(c.wd), T(c.momentum), T(1 - 0.1), c.wd != 0, c.first, c.nesterov};
      std::vector<T> want_p = p0, want_buf = buf0;
      Of<T>(base).sgd_step(want_p.data(), g.data(), c.momentum != 0 ? want_buf.data() : nullptr, n, s);
      for (const IsaKernelTable* t : WiderVariants()) {
        SCOPED_TRACE(testing::Message() << t->name << " n=" << n << " sgd momentum=" << c.momentum
                                        << " wd=" << c.wd << " first=" << c.first << " nesterov=" << c.nesterov);
        std::vector<T> p = p0, buf = buf0;
        Of<T>(*t).sgd_step(p.data(), g.data(), c.momentum != 0 ? buf.data() : nullptr, n, s);
        ExpectBitIdentical(want_p, p, "param");
        ExpectBitIdentical(want_buf, buf, "momentum buffer");
      }
    }
    std::vector<T> v0 = Random<T>(n, 8 + n);
    for (T& x : v0) x = x * x;  // exp_avg_sq is non-negative
    for (bool decoupled : {false, true}) {
      cpu::AdamScalars<T> s{T(1 - 1e-3 * 0.01), T(0.01), T(0.1),  T(0.999), T(0.001),
                            T(-1e-3 / 0.19),     T(0.0447), T(1e-8), true,     decoupled};
      std::vector<T> want_p = p0, want_m = buf0, want_v = v0;
      Of<T>(base).adam_step(want_p.data(), g.data(), want_m.data(), want_v.data(), n, s);
      for (const IsaKernelTable* t : WiderVariants()) {
        SCOPED_TRACE(testing::Message() << t->name << " n=" << n << " adam decoupled=" << decoupled);
        std::vector<T> p = p0, m = buf0, v = v0;
        Of<T>(*t).adam_step(p.data(), g.data(), m.data(), v.data(), n, s);
        ExpectBitIdentical(want_p, p, "param");
        ExpectBitIdentical(want_m, m, "exp_avg");
        ExpectBitIdentical(want_v, v, "exp_avg_sq");
      }
    }
  }
}

TEST(CpuIsaKernels, OptimizerStepsOfEveryVariantAreBitIdenticalToSse2) {
  CompareOptimizers<float>();
  CompareOptimizers<double>();
}

// GEMM: each variant (sse2 included) within rounding of a double reference, and of sse2.
struct Shape {
  int64_t m, n, k;
};
const Shape kShapes[] = {{1, 1, 1}, {7, 5, 13}, {37, 53, 301}, {3, 129, 17}, {130, 7, 1000}, {64, 200, 784}};

template <typename T>
void CompareGemm() {
  const std::vector<const IsaKernelTable*> variants = [] {
    std::vector<const IsaKernelTable*> v = {IsaKernelsFor(CpuIsa::kSse2)};
    for (const IsaKernelTable* t : WiderVariants()) v.push_back(t);
    return v;
  }();
  const double eps = std::numeric_limits<T>::epsilon();
  for (const Shape& sh : kShapes) {
    const std::vector<T> a = Random<T>(sh.m * sh.k, 31 + sh.k), b = Random<T>(sh.k * sh.n, 37 + sh.n);
    const std::vector<T> c0 = Random<T>(sh.m * sh.n, 41 + sh.m);
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      // op(a) @ op(b) in double, and the scale of its rounding error: sum |a||b| along k.
      std::vector<double> dot(sh.m * sh.n), dot_abs(sh.m * sh.n);
      for (int64_t i = 0; i < sh.m; ++i) {
        for (int64_t j = 0; j < sh.n; ++j) {
          double s = 0, s_abs = 0;
          for (int64_t p = 0; p < sh.k; ++p) {
            const double x = ta ? a[p * sh.m + i] : a[i * sh.k + p];
            const double y = tb ? b[j * sh.k + p] : b[p * sh.n + j];
            s += x * y;
            s_abs += std::fabs(x * y);
          }
          dot[i * sh.n + j] = s;
          dot_abs[i * sh.n + j] = s_abs;
        }
      }
      for (double beta : {0.0, 1.0, -0.5}) {
        const double alpha = beta == 1.0 ? 1.0 : -0.75;
        for (const IsaKernelTable* t : variants) {
          SCOPED_TRACE(testing::Message() << t->name << " gemm m=" << sh.m << " n=" << sh.n << " k=" << sh.k
                                          << " trans_a=" << ta << " trans_b=" << tb << " beta=" << beta);
          // beta == 0 must not read c: start from NaN to prove it.
          std::vector<T> c = beta == 0 ? std::vector<T>(c0.size(), std::numeric_limits<T>::quiet_NaN()) : c0;
          Of<T>(*t).gemm({sh.m, sh.n, sh.k, a.data(), ta, b.data(), tb, T(alpha), T(beta), c.data()});
          for (int64_t i = 0; i < sh.m * sh.n; ++i) {
            const double want = alpha * dot[i] + beta * c0[i];
            const double scale = std::fabs(alpha) * dot_abs[i] + std::fabs(beta * c0[i]);
            ASSERT_NEAR(c[i], want, 4 * eps * (sh.k + 2) * scale + 1e-30) << "element " << i;
          }
        }
      }
    }
  }
}

TEST(CpuIsaKernels, GemmOfEveryVariantMatchesADoubleReferenceToRounding) {
  WiderVariants();  // prints which variants run
  CompareGemm<float>();
  CompareGemm<double>();
}

template <typename T>
void CompareLinear() {
  const IsaKernelTable& base = *IsaKernelsFor(CpuIsa::kSse2);
  const double eps = std::numeric_limits<T>::epsilon();
  for (const Shape& sh : kShapes) {
    const std::vector<T> x = Random<T>(sh.m * sh.k, 51 + sh.k), w = Random<T>(sh.n * sh.k, 53 + sh.n);
    const std::vector<T> bias = Random<T>(sh.n, 57 + sh.m);
    for (bool with_bias : {false, true}) {
      std::vector<T> want(sh.m * sh.n);
      Of<T>(base).linear(sh.m, sh.n, sh.k, x.data(), w.data(), with_bias ? bias.data() : nullptr, want.data());
      for (const IsaKernelTable* t : WiderVariants()) {
        SCOPED_TRACE(testing::Message() << t->name << " linear m=" << sh.m << " n=" << sh.n << " k=" << sh.k
                                        << " bias=" << with_bias);
        std::vector<T> got(sh.m * sh.n, std::numeric_limits<T>::quiet_NaN());
        Of<T>(*t).linear(sh.m, sh.n, sh.k, x.data(), w.data(), with_bias ? bias.data() : nullptr, got.data());
        // |x| and |w| are at most 2: each product term is at most 4 in magnitude.
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 8 * eps * (sh.k + 1) * 4) << i;
      }
    }
  }
}

TEST(CpuIsaKernels, LinearOfEveryVariantAgreesWithSse2ToRounding) {
  CompareLinear<float>();
  CompareLinear<double>();
}

}  // namespace
}  // namespace tinyddp
