// Every op of tensor/ops.h on the CPU, against straightforward double-precision loops written here, on
// random inputs of odd sizes ([7, 13], [1, 1], [33, 1000], ...), in float32 and float64. Also the
// messages that shape/dtype misuse stops with.
#include "tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/testing/ops_test_util.h"

namespace tinyddp {
namespace {

using ::tinyddp::testing::AsDoubles;
using ::tinyddp::testing::ExpectAllNear;
using ::tinyddp::testing::RandomTensor;
using ::tinyddp::testing::Tol;

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64};

// Row-major [rows, cols] element (i, j), read through an optional transpose.
double At(const std::vector<double>& m, int64_t cols, bool trans, int64_t i, int64_t j) {
  return trans ? m[j * cols + i] : m[i * cols + j];
}

std::vector<double> RefMatMul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const auto x = AsDoubles(a), y = AsDoubles(b);
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1), n = tb ? b.size(0) : b.size(1);
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += At(x, a.size(1), ta, i, p) * At(y, b.size(1), tb, p, j);
      c[i * n + j] = s;
    }
  }
  return c;
}

struct MatMulCase {
  int64_t m, k, n;
};
const MatMulCase kMatMulCases[] = {{7, 13, 5}, {1, 1, 1}, {33, 1000, 17}, {64, 784, 33}};

TEST(MatMul, MatchesReferenceForEveryTransposeCombination) {
  uint32_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (const auto& c : kMatMulCases) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Tensor a = RandomTensor(ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, dt, seed++);
          Tensor b = RandomTensor(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, dt, seed++);
          Tensor out = ops::MatMul(a, b, ta, tb);
          EXPECT_EQ(out.shape(), Shape({c.m, c.n}));
          ExpectAllNear(AsDoubles(out), RefMatMul(a, b, ta, tb), Tol(dt, c.k), 0,
                        ::testing::Message() << DTypeName(dt) << " m=" << c.m << " k=" << c.k << " n=" << c.n
                                             << " ta=" << ta << " tb=" << tb);
        }
      }
    }
  }
}

TEST(MatMulInto, ComputesAlphaProductPlusBetaOut) {
  uint32_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a = RandomTensor(ta ? Shape{13, 7} : Shape{7, 13}, dt, seed++);
        Tensor b = RandomTensor(tb ? Shape{9, 13} : Shape{13, 9}, dt, seed++);
        Tensor out = RandomTensor({7, 9}, dt, seed++);
        const std::vector<double> before = AsDoubles(out), prod = RefMatMul(a, b, ta, tb);
        ops::MatMulInto(out, a, b, ta, tb, 0.5f, 1.5f);
        std::vector<double> want(before.size());
        for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * prod[i] + 1.5 * before[i];
        ExpectAllNear(AsDoubles(out), want, Tol(dt, 13));
        // beta = 1 is the gradient-accumulation case.
        ops::MatMulInto(out, a, b, ta, tb, 1.f, 1.f);
        for (size_t i = 0; i < want.size(); ++i) want[i] += prod[i];
        ExpectAllNear(AsDoubles(out), want, Tol(dt, 26));
      }
    }
  }
}

TEST(MatMulInto, BetaZeroIgnoresNaNsAlreadyInOut) {
  Tensor a = RandomTensor({5, 3}, DType::kFloat32, 7), b = RandomTensor({3, 4}, DType::kFloat32, 8);
  Tensor out = Tensor::Full({5, 4}, std::numeric_limits<double>::quiet_NaN());
  ops::MatMulInto(out, a, b, false, false, 1.f, 0.f);
  ExpectAllNear(AsDoubles(out), RefMatMul(a, b, false, false), Tol(DType::kFloat32, 3));
}

TEST(Linear, IsXTimesWTransposedPlusBias) {
  uint32_t seed = 200;
  for (DType dt : kFloatTypes) {
    for (const auto& c : kMatMulCases) {
      Tensor x = RandomTensor({c.m, c.k}, dt, seed++), w = RandomTensor({c.n, c.k}, dt, seed++);
      Tensor bias = RandomTensor({c.n}, dt, seed++);
      std::vector<double> want = RefMatMul(x, w, false, true);
      ExpectAllNear(AsDoubles(ops::Linear(x, w, Tensor())), want, Tol(dt, c.k));
      const auto bv = AsDoubles(bias);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) want[i * c.n + j] += bv[j];
      }
      ExpectAllNear(AsDoubles(ops::Linear(x, w, bias)), want, Tol(dt, c.k + 1));
    }
  }
}

// --- Elementwise --------------------------------------------------------------------------------

const Shape kShapes[] = {{7, 13}, {1, 1}, {33, 1000}, {1000003}};

template <typename Ref>
void ExpectBinary(Tensor (*op)(const Tensor&, const Tensor&), Ref ref, const char* name, double low = -1.0) {
  uint32_t seed = 300;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kShapes) {
      Tensor a = RandomTensor(s, dt, seed++), b = RandomTensor(s, dt, seed++, low, 1.0);
      const auto x = AsDoubles(a), y = AsDoubles(b);
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = ref(x[i], y[i]);
      Tensor out = op(a, b);
      EXPECT_EQ(out.shape(), s);
      ExpectAllNear(AsDoubles(out), want, 0, Tol(dt), name);
    }
  }
}

TEST(Elementwise, AddSubMulDivMatchReference) {
  ExpectBinary(ops::Add, [](double x, double y) { return x + y; }, "Add");
  ExpectBinary(ops::Sub, [](double x, double y) { return x - y; }, "Sub");
  ExpectBinary(ops::Mul, [](double x, double y) { return x * y; }, "Mul");
  ExpectBinary(ops::Div, [](double x, double y) { return x / y; }, "Div", /*low=*/0.25);  // away from 0
}

TEST(Elementwise, ScaleAndAddRowVector) {
  uint32_t seed = 400;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : {Shape{7, 13}, Shape{1, 1}, Shape{33, 1000}}) {
      Tensor x = RandomTensor(s, dt, seed++), row = RandomTensor({s[1]}, dt, seed++);
      const auto xv = AsDoubles(x), rv = AsDoubles(row);
      std::vector<double> scaled(xv.size()), added(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        scaled[i] = -2.5 * xv[i];
        added[i] = xv[i] + rv[i % s[1]];
      }
      ExpectAllNear(AsDoubles(ops::Scale(x, -2.5)), scaled, 0, Tol(dt));
      ExpectAllNear(AsDoubles(ops::AddRowVector(x, row)), added, 0, Tol(dt));
    }
  }
}

double RefGelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(Elementwise, ReluGeluAndTheirBackwardsMatchReference) {
  uint32_t seed = 500;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kShapes) {
      Tensor x = RandomTensor(s, dt, seed++, -4, 4), g = RandomTensor(s, dt, seed++);
      const auto xv = AsDoubles(x), gv = AsDoubles(g);
      std::vector<double> relu(xv.size()), relu_b(xv.size()), gelu(xv.size()), gelu_b(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        relu[i] = xv[i] > 0 ? xv[i] : 0;
        relu_b[i] = xv[i] > 0 ? gv[i] : 0;
        gelu[i] = RefGelu(xv[i]);
        const double h = 1e-5;  // central difference of the double reference: error ~h^2
        gelu_b[i] = gv[i] * (RefGelu(xv[i] + h) - RefGelu(xv[i] - h)) / (2 * h);
      }
      Tensor y = ops::Relu(x);
      ExpectAllNear(AsDoubles(y), relu, 0);
      ExpectAllNear(AsDoubles(ops::ReluBackward(g, y)), relu_b, 0);
      ExpectAllNear(AsDoubles(ops::ReluBackward(g, x)), relu_b, 0);
      ExpectAllNear(AsDoubles(ops::Gelu(x)), gelu, 4 * Tol(dt), 4 * Tol(dt), "Gelu");
      ExpectAllNear(AsDoubles(ops::GeluBackward(g, x)), gelu_b, 1e-8 + 8 * Tol(dt), 8 * Tol(dt), "GeluBackward");
    }
  }
}

TEST(Elementwise, ReluKeepsNaN) {
  Tensor x = Tensor::FromVector(std::vector<float>{-1.f, NAN, 2.f}, {3});
  std::vector<float> y = ops::Relu(x).ToVector<float>();
  EXPECT_EQ(y[0], 0.f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 2.f);
}

// --- In place -----------------------------------------------------------------------------------

TEST(InPlace, AddIntoARowsViewTouchesOnlyThoseRows) {
  for (DType dt : kFloatTypes) {
    Tensor big = RandomTensor({9, 13}, dt, 600);
    const auto before = AsDoubles(big);
    Tensor src = RandomTensor({4, 13}, dt, 601);
    const auto sv = AsDoubles(src);
    Tensor view = big.Rows(3, 7);
    ops::AddInto(view, src, -0.75);
    std::vector<double> want = before;
    for (int i = 0; i < 4 * 13; ++i) want[3 * 13 + i] += -0.75 * sv[i];
    ExpectAllNear(AsDoubles(big), want, 0, Tol(dt));
    ops::ScaleInPlace(view, 3.0);
    for (int i = 0; i < 4 * 13; ++i) want[3 * 13 + i] *= 3.0;
    ExpectAllNear(AsDoubles(big), want, 0, 3 * Tol(dt));
  }
}

TEST(InPlace, FillSetsEveryElementOfEveryDType) {
  Tensor f = Tensor::Empty({7, 13});
  ops::Fill(f, 0.3);
  EXPECT_EQ(f.ToVector<float>(), std::vector<float>(91, 0.3f));
  Tensor i = Tensor::Empty({5}, DType::kInt64);
  ops::Fill(i, -9);
  EXPECT_EQ(i.ToVector<int64_t>(), std::vector<int64_t>(5, -9));
  Tensor b = Tensor::Empty({3}, DType::kBFloat16);
  ops::Fill(b, 0.3);
  for (BFloat16 v : b.ToVector<BFloat16>()) EXPECT_EQ(v.bits, BFloat16(0.3f).bits);
}

TEST(InPlace, CopyIntoCopiesAcrossShapesWithEqualCounts) {
  Tensor src = RandomTensor({7, 13}, DType::kFloat64, 700);
  Tensor dst = Tensor::Zeros({91}, DType::kFloat64);
  ops::CopyInto(dst, src);
  EXPECT_EQ(dst.ToVector<double>(), src.ToVector<double>());
  EXPECT_FALSE(dst.SharesStorageWith(src));
  ops::CopyInto(dst, dst);  // onto itself: a no-op, not an overlap error
  EXPECT_EQ(dst.ToVector<double>(), src.ToVector<double>());
}

// --- Reductions ---------------------------------------------------------------------------------

TEST(Reduce, SumAndMeanOfEverything) {
  uint32_t seed = 800;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kShapes) {
      Tensor x = RandomTensor(s, dt, seed++);
      double total = 0;
      for (double v : AsDoubles(x)) total += v;
      Tensor sum = ops::Sum(x);
      EXPECT_EQ(sum.dim(), 0);
      // Accumulated in double: only the final rounding to float remains.
      EXPECT_NEAR(sum.Item(), total, 1e-6 * std::max(1.0, std::fabs(total)) + 1e-9);
      EXPECT_NEAR(ops::Mean(x).Item(), total / x.numel(), 1e-6);
    }
  }
}

// Reference sum of x [d0, d1, ...] along `dim`.
std::vector<double> RefSumDim(const Tensor& x, int64_t dim) {
  const auto v = AsDoubles(x);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= x.size(i);
  for (int64_t i = dim + 1; i < x.dim(); ++i) inner *= x.size(i);
  const int64_t n = x.size(dim);
  std::vector<double> out(outer * inner, 0.0);
  for (int64_t p = 0; p < outer; ++p) {
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t q = 0; q < inner; ++q) out[p * inner + q] += v[(p * n + k) * inner + q];
    }
  }
  return out;
}

TEST(Reduce, SumAndMeanAlongEachDim) {
  uint32_t seed = 900;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : {Shape{5, 7, 3}, Shape{3, 2, 300}, Shape{33, 1000}, Shape{1, 1}, Shape{1001}}) {
      Tensor x = RandomTensor(s, dt, seed++);
      for (int64_t d = -static_cast<int64_t>(s.size()); d < static_cast<int64_t>(s.size()); ++d) {
        const int64_t dim = d < 0 ? d + s.size() : d;
        const std::vector<double> want = RefSumDim(x, dim);
        Tensor sum = ops::Sum(x, d);
        Shape expect = s;
        expect.erase(expect.begin() + dim);
        EXPECT_EQ(sum.shape(), expect);
        ExpectAllNear(AsDoubles(sum), want, 1e-6, 1e-6, ::testing::Message() << "Sum dim " << d);
        Tensor mean = ops::Mean(x, d, /*keepdim=*/true);
        expect = s;
        expect[dim] = 1;
        EXPECT_EQ(mean.shape(), expect);
        std::vector<double> want_mean = want;
        for (double& w : want_mean) w /= s[dim];
        ExpectAllNear(AsDoubles(mean), want_mean, 1e-6, 1e-6, ::testing::Message() << "Mean dim " << d);
      }
    }
  }
}

TEST(Reduce, ArgMaxTakesTheFirstOfTiesAlongTheLastDim) {
  Tensor x = Tensor::FromVector(std::vector<float>{1, 5, 5, 2, /**/ -3, -1, -2, -1, /**/ 7, 7, 7, 7}, {3, 4});
  EXPECT_EQ(ops::ArgMax(x).ToVector<int64_t>(), (std::vector<int64_t>{1, 1, 0}));
  for (DType dt : kFloatTypes) {
    Tensor r = RandomTensor({33, 1000}, dt, 1000);
    const auto v = AsDoubles(r);
    std::vector<double> want(33);
    for (int i = 0; i < 33; ++i) {
      int best = 0;
      for (int j = 1; j < 1000; ++j) {
        if (v[i * 1000 + j] > v[i * 1000 + best]) best = j;
      }
      want[i] = best;
    }
    ExpectAllNear(AsDoubles(ops::ArgMax(r)), want, 0);
  }
}

// --- Losses -------------------------------------------------------------------------------------

std::vector<double> RefLogSoftmax(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[i * cols + j]);
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[i * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[i * cols + j] - m - std::log(s);
  }
  return out;
}

Tensor RandomLabels(int64_t n, int64_t classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> v(n);
  for (auto& l : v) l = std::uniform_int_distribution<int64_t>(0, classes - 1)(gen);
  return Tensor::FromVector(v, {n});
}

const Shape kLogitShapes[] = {{7, 13}, {1, 1}, {33, 1000}, {64, 10}};

TEST(Loss, LogSoftmaxMatchesReferenceAndStaysFiniteForHugeLogits) {
  uint32_t seed = 1100;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kLogitShapes) {
      Tensor x = RandomTensor(s, dt, seed++, -5, 5);
      ExpectAllNear(AsDoubles(ops::LogSoftmax(x)), RefLogSoftmax(AsDoubles(x), s[0], s[1]), 4 * Tol(dt, 10), 0);
    }
    // Logits of 1000 overflow exp() in float and double unless the max is subtracted first.
    Tensor big = ops::Scale(RandomTensor({4, 7}, dt, seed++, 990, 1000), 1.0);
    for (double v : AsDoubles(ops::LogSoftmax(big))) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(Loss, CrossEntropyIsMeanNegativeLogLikelihoodAndReturnsSoftmax) {
  uint32_t seed = 1200;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kLogitShapes) {
      Tensor logits = RandomTensor(s, dt, seed++, -5, 5);
      Tensor labels = RandomLabels(s[0], s[1], seed++);
      const auto ls = RefLogSoftmax(AsDoubles(logits), s[0], s[1]);
      const auto lab = labels.ToVector<int64_t>();
      double loss = 0;
      std::vector<double> softmax(ls.size());
      for (int64_t i = 0; i < s[0]; ++i) loss -= ls[i * s[1] + lab[i]];
      loss /= s[0];
      for (size_t i = 0; i < ls.size(); ++i) softmax[i] = std::exp(ls[i]);
      Tensor sm;
      Tensor got = ops::CrossEntropy(logits, labels, &sm);
      EXPECT_EQ(got.dim(), 0);
      EXPECT_NEAR(got.Item(), loss, 4 * Tol(dt, 10));
      ExpectAllNear(AsDoubles(sm), softmax, 4 * Tol(dt), 0, "softmax");

      // Backward: (softmax - onehot) * g / N, with an incoming gradient g != 1.
      Tensor g = Tensor::Full({}, 0.7, dt);
      std::vector<double> want = softmax;
      for (int64_t i = 0; i < s[0]; ++i) want[i * s[1] + lab[i]] -= 1;
      for (double& w : want) w *= 0.7 / s[0];
      ExpectAllNear(AsDoubles(ops::CrossEntropyBackward(sm, labels, g)), want, 4 * Tol(dt), 0, "backward");
    }
  }
}

TEST(Loss, CrossEntropyBackwardIsTheFiniteDifferenceGradientInFloat64) {
  Tensor logits = RandomTensor({5, 7}, DType::kFloat64, 1300, -3, 3);
  Tensor labels = RandomLabels(5, 7, 1301);
  Tensor sm;
  ops::CrossEntropy(logits, labels, &sm);
  const auto analytic = AsDoubles(ops::CrossEntropyBackward(sm, labels, Tensor::Full({}, 1.0, DType::kFloat64)));
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const double h = 1e-6;
    Tensor plus = logits.Clone(), minus = logits.Clone();
    plus.data<double>()[i] += h;
    minus.data<double>()[i] -= h;
    const double numeric = (ops::CrossEntropy(plus, labels).Item() - ops::CrossEntropy(minus, labels).Item()) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-8) << "element " << i;
  }
}

TEST(Loss, CrossEntropyOfHugeLogitsIsFinite) {
  for (DType dt : kFloatTypes) {
    Tensor logits = RandomTensor({3, 5}, dt, 1400, 5000, 6000);
    Tensor sm;
    const double loss = ops::CrossEntropy(logits, RandomLabels(3, 5, 1401), &sm).Item();
    EXPECT_TRUE(std::isfinite(loss));
    for (double v : AsDoubles(sm)) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(Loss, MseIsTheMeanSquaredDifference) {
  uint32_t seed = 1500;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kShapes) {
      Tensor a = RandomTensor(s, dt, seed++), b = RandomTensor(s, dt, seed++);
      const auto x = AsDoubles(a), y = AsDoubles(b);
      double want = 0;
      for (size_t i = 0; i < x.size(); ++i) want += (x[i] - y[i]) * (x[i] - y[i]);
      want /= x.size();
      EXPECT_NEAR(ops::MseLoss(a, b).Item(), want, 1e-6 * want);
    }
  }
}

// --- Indexing and casts -------------------------------------------------------------------------

TEST(Index, IndexSelectRowsGathersRowsOfAnyDType) {
  std::vector<uint8_t> pixels(10 * 3 * 2);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7 + 3);
  Tensor images = Tensor::FromVector(pixels, {10, 3, 2});
  Tensor idx = Tensor::FromVector(std::vector<int64_t>{9, 0, 4, 4}, {4});
  Tensor batch = ops::IndexSelectRows(images, idx);
  EXPECT_EQ(batch.shape(), Shape({4, 3, 2}));
  const auto got = batch.ToVector<uint8_t>();
  const int64_t order[] = {9, 0, 4, 4};
  for (int b = 0; b < 4; ++b) {
    for (int e = 0; e < 6; ++e) EXPECT_EQ(got[b * 6 + e], pixels[order[b] * 6 + e]);
  }
  Tensor f = RandomTensor({7, 13}, DType::kFloat32, 1600);
  EXPECT_EQ(ops::IndexSelectRows(f, Tensor::FromVector(std::vector<int64_t>{6}, {1})).ToVector<float>(),
            f.Rows(6, 7).ToVector<float>());
}

TEST(Cast, Uint8ToFloat32WithScaleIsTheNearestFloatOfTheQuotient) {
  std::vector<uint8_t> v(256);
  for (int i = 0; i < 256; ++i) v[i] = static_cast<uint8_t>(i);
  const auto got = ops::Cast(Tensor::FromVector(v, {16, 16}), DType::kFloat32, 1.0 / 255).ToVector<float>();
  for (int i = 0; i < 256; ++i) EXPECT_EQ(got[i], static_cast<float>(i / 255.0)) << i;
}

TEST(Cast, Float32ToBFloat16AndBackRoundsToNearestEven) {
  Tensor x = RandomTensor({33, 1000}, DType::kFloat32, 1700, -50, 50);
  Tensor b = ops::Cast(x, DType::kBFloat16);
  const auto xv = x.ToVector<float>();
  const auto bv = b.ToVector<BFloat16>();
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(bv[i].bits, BFloat16(xv[i]).bits) << i;
  Tensor back = Tensor::Empty({33, 1000});
  ops::CastInto(back, b);
  const auto back_v = back.ToVector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(back_v[i], static_cast<float>(bv[i]));
    ASSERT_NEAR(back_v[i], xv[i], std::fabs(xv[i]) * (1.0 / 256));  // 8 significant bits
  }
}

TEST(Cast, EveryPairOfDTypesConvertsSmallIntegersExactly) {
  const DType all[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64, DType::kUInt8};
  std::vector<int32_t> v = {0, 1, 2, 7, 100, 127, 3, 42, 99, 5, 11};
  for (DType from : all) {
    Tensor x = ops::Cast(Tensor::FromVector(v, {11}), from);
    for (DType to : all) {
      Tensor y = ops::Cast(x, to);
      EXPECT_EQ(y.dtype(), to);
      EXPECT_EQ(ops::Cast(y, DType::kInt32).ToVector<int32_t>(), v) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
  // Float -> integer truncates toward zero; integer -> uint8 wraps, as in PyTorch.
  Tensor f = Tensor::FromVector(std::vector<float>{2.9f, -2.9f}, {2});
  EXPECT_EQ(ops::Cast(f, DType::kInt64).ToVector<int64_t>(), (std::vector<int64_t>{2, -2}));
  Tensor neg = Tensor::FromVector(std::vector<int64_t>{-1, 256, 300}, {3});
  EXPECT_EQ(ops::Cast(neg, DType::kUInt8).ToVector<uint8_t>(), (std::vector<uint8_t>{255, 0, 44}));
}

// --- Misuse -------------------------------------------------------------------------------------

TEST(OpsDeathTest, MatMulWithMismatchedInnerDimensionsNamesBothShapes) {
  Tensor a = Tensor::Zeros({64, 784}), b = Tensor::Zeros({512, 700});
  EXPECT_DEATH(ops::MatMul(a, b, false, true),
               "MatMul: inner dimensions differ: a is \\[64, 784\\] \\(trans_a=0\\), b is \\[512, 700\\] "
               "\\(trans_b=1\\).*hint");
}

TEST(OpsDeathTest, AddOfDifferentShapesStops) {
  EXPECT_DEATH(ops::Add(Tensor::Zeros({2, 3}), Tensor::Zeros({3, 2})),
               "Add: shapes differ: a is \\[2, 3\\] float32 cpu, b is \\[3, 2\\] float32 cpu");
}

TEST(OpsDeathTest, MixedDTypesStop) {
  EXPECT_DEATH(ops::Mul(Tensor::Zeros({2}), Tensor::Zeros({2}, DType::kFloat64)),
               "Mul: a is \\[2\\] float32 cpu but b is \\[2\\] float64 cpu; hint: ops::Cast");
}

TEST(OpsDeathTest, IntegerTensorsAreRejectedByMathOps) {
  EXPECT_DEATH(ops::Relu(Tensor::Zeros({2}, DType::kInt32)),
               "Relu: x must be float32, float64 or bfloat16, got \\[2\\] int32");
}

TEST(OpsDeathTest, OutOfRangeLabelIsAClearError) {
  Tensor logits = Tensor::Zeros({3, 10});
  Tensor labels = Tensor::FromVector(std::vector<int64_t>{1, 10, 2}, {3});
  EXPECT_DEATH(ops::CrossEntropy(logits, labels), "CrossEntropy: label 10 at row 1 is out of range .*10 classes");
}

TEST(OpsDeathTest, LabelsMustBeInt64) {
  EXPECT_DEATH(ops::CrossEntropy(Tensor::Zeros({3, 10}), Tensor::Zeros({3})),
               "CrossEntropy: labels must be int64 \\[3\\].*got \\[3\\] float32");
}

TEST(OpsDeathTest, AddRowVectorOfTheWrongLengthStops) {
  EXPECT_DEATH(ops::AddRowVector(Tensor::Zeros({4, 5}), Tensor::Zeros({4})),
               "AddRowVector: needs x \\[N, C\\] and row \\[C\\], got x \\[4, 5\\]");
}

TEST(OpsDeathTest, MatMulIntoAnOverlappingOutputStops) {
  Tensor a = Tensor::Zeros({4, 4});
  EXPECT_DEATH(ops::MatMulInto(a, a, a, false, false), "MatMulInto: out overlaps an operand");
}

TEST(OpsDeathTest, IndexOutOfRangeStops) {
  EXPECT_DEATH(ops::IndexSelectRows(Tensor::Zeros({5, 2}), Tensor::FromVector(std::vector<int64_t>{5}, {1})),
               "IndexSelectRows: index 5 at position 0 is out of range for 5 rows");
}

}  // namespace
}  // namespace tinyddp
