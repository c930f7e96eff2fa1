// The bfloat16 sweep on the CPU (after ggml's test-backend-ops): every op of tensor/ops.h that takes
// bfloat16 runs on bfloat16 inputs and, on the same values in float32, as the float32 op; the two
// answers are compared. Inputs are drawn as bfloat16 values, so both ops see identical numbers, and
// sizes are odd. The claim checked is the definition in ops.h: a bfloat16 op is the float32 op rounded
// once, so its result is the float32 result correctly rounded: the nearest bfloat16, ties to even
// (relative error at most 2^-8; one ulp off fails). Ops with a float32 result of bfloat16 inputs (the
// weight gradient, the bias gradient, the losses, the optimizer's master weights) must match the
// float32 op exactly.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "tensor/testing/bf16_test_util.h"
#include "tensor/testing/ops_test_util.h"

namespace tinyddp {
namespace {

using ::tinyddp::testing::ExpectAllNear;
using ::tinyddp::testing::ExpectCorrectlyRounded;
using ::tinyddp::testing::Floats;
using ::tinyddp::testing::RandomBf16Values;

constexpr DType kBf16 = DType::kBFloat16;
const std::vector<int64_t> kSizes = {1, 7, 1000, 4099};

Tensor Bf16(const Tensor& x) { return ops::Cast(x, kBf16); }

/// Same elements, bit for bit (float32 tensors).
void ExpectSameFloats(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = Floats(got), w = Floats(want);
  int64_t misses = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    if (++misses <= 5) ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", want " << w[i];
  }
  EXPECT_EQ(misses, 0) << what;
}

// --- Elementwise ---------------------------------------------------------------------------------------

TEST(Bf16Ops, ElementwiseOpsAreTheFloat32OpsCorrectlyRounded) {
  for (int64_t n : kSizes) {
    const Tensor a = RandomBf16Values({n}, 1, -3.0, 3.0), b = RandomBf16Values({n}, 2, 0.25, 2.0);
    const Tensor ha = Bf16(a), hb = Bf16(b);
    const std::string c = absl::StrCat("[", n, "]");
    ExpectCorrectlyRounded(ops::Add(ha, hb), ops::Add(a, b), "Add " + c);
    ExpectCorrectlyRounded(ops::Sub(ha, hb), ops::Sub(a, b), "Sub " + c);
    ExpectCorrectlyRounded(ops::Mul(ha, hb), ops::Mul(a, b), "Mul " + c);
    ExpectCorrectlyRounded(ops::Div(ha, hb), ops::Div(a, b), "Div " + c);
    ExpectCorrectlyRounded(ops::Scale(ha, 0.37), ops::Scale(a, 0.37), "Scale " + c);
    ExpectCorrectlyRounded(ops::Relu(ha), ops::Relu(a), "Relu " + c);
    ExpectCorrectlyRounded(ops::ReluBackward(hb, ha), ops::ReluBackward(b, a), "ReluBackward " + c);
    ExpectCorrectlyRounded(ops::Gelu(ha), ops::Gelu(a), "Gelu " + c);
    ExpectCorrectlyRounded(ops::GeluBackward(hb, ha), ops::GeluBackward(b, a), "GeluBackward " + c);

    Tensor dst = a.Clone(), hdst = Bf16(a);
    ops::AddInto(dst, b, -0.61);
    ops::AddInto(hdst, hb, -0.61);
    ExpectCorrectlyRounded(hdst, dst, "AddInto " + c);
    Tensor scaled = a.Clone(), hscaled = Bf16(a);
    ops::ScaleInPlace(scaled, 1.7);
    ops::ScaleInPlace(hscaled, 1.7);
    ExpectCorrectlyRounded(hscaled, scaled, "ScaleInPlace " + c);
  }
}

TEST(Bf16Ops, AddRowVectorIsTheFloat32OpCorrectlyRounded) {
  for (const Shape& shape : {Shape{1, 1}, Shape{7, 13}, Shape{33, 1024}}) {
    const Tensor x = RandomBf16Values(shape, 3), row = RandomBf16Values({shape[1]}, 4);
    ExpectCorrectlyRounded(ops::AddRowVector(Bf16(x), Bf16(row)), ops::AddRowVector(x, row),
                           "AddRowVector " + ShapeToString(shape));
  }
}

// --- Matrix products -----------------------------------------------------------------------------------

TEST(Bf16Ops, MatMulIsTheFloat32ProductCorrectlyRoundedForEveryTransposeCombination) {
  const int64_t m = 37, n = 29, k = 133;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = RandomBf16Values(ta ? Shape{k, m} : Shape{m, k}, 5);
      const Tensor b = RandomBf16Values(tb ? Shape{n, k} : Shape{k, n}, 6);
      ExpectCorrectlyRounded(ops::MatMul(Bf16(a), Bf16(b), ta, tb), ops::MatMul(a, b, ta, tb),
                             absl::StrCat("MatMul trans_a=", ta, " trans_b=", tb));
    }
  }
}

TEST(Bf16Ops, MatMulAccumulatesInFloat32) {
  // 1 + 256 * 2^-9 = 1.5. Rounding the running sum to bfloat16 (8 significant bits) would drop every
  // 2^-9 against the 1 and give 1.
  std::vector<float> ones(257, 1.f), tiny(257, 1.f / 512);
  tiny[0] = 1.f;
  const Tensor a = Bf16(Tensor::FromVector(ones, {1, 257})), b = Bf16(Tensor::FromVector(tiny, {257, 1}));
  EXPECT_EQ(Floats(ops::MatMul(a, b))[0], 1.5f);
}

TEST(Bf16Ops, MatMulIntoFloat32OutIsTheFloat32ProductWithBetaZeroOrOne) {
  // dW = dY^T X: the weight gradient of a bfloat16 layer, written (beta 0) or accumulated (beta 1)
  // into a float32 buffer. Same bits as the float32 product of the same values: nothing rounds to bf16.
  const int64_t batch = 67, out = 31, in = 45;
  const Tensor dy = RandomBf16Values({batch, out}, 7), x = RandomBf16Values({batch, in}, 8);
  const Tensor start = testing::RandomTensor({out, in}, DType::kFloat32, 9);  // float32 values, not bf16
  for (float beta : {0.f, 1.f}) {
    for (float alpha : {1.f, 0.5f}) {
      Tensor want = start.Clone(), got = start.Clone();
      ops::MatMulInto(want, dy, x, true, false, alpha, beta);
      ops::MatMulInto(got, Bf16(dy), Bf16(x), true, false, alpha, beta);
      ExpectSameFloats(got, want, absl::StrCat("MatMulInto float32 out, alpha=", alpha, " beta=", beta));
    }
  }
}

TEST(Bf16Ops, MatMulIntoBf16OutAddsBetaTimesOutBeforeRounding) {
  const Tensor a = RandomBf16Values({21, 40}, 10), b = RandomBf16Values({40, 19}, 11);
  const Tensor c = RandomBf16Values({21, 19}, 12);
  Tensor want = c.Clone(), got = Bf16(c);
  ops::MatMulInto(want, a, b, false, false, 0.75f, 1.f);
  ops::MatMulInto(got, Bf16(a), Bf16(b), false, false, 0.75f, 1.f);
  ExpectCorrectlyRounded(got, want, "MatMulInto bf16 out, beta=1");
}

TEST(Bf16Ops, LinearAndLinearReluAreTheFloat32OpsCorrectlyRounded) {
  const Tensor x = RandomBf16Values({53, 70}, 13), w = RandomBf16Values({23, 70}, 14);
  const Tensor bias = RandomBf16Values({23}, 15);
  for (bool with_bias : {true, false}) {
    const Tensor b32 = with_bias ? bias : Tensor(), b16 = with_bias ? Bf16(bias) : Tensor();
    const std::string c = with_bias ? " with bias" : " without bias";
    ExpectCorrectlyRounded(ops::Linear(Bf16(x), Bf16(w), b16), ops::Linear(x, w, b32), "Linear" + c);
    ExpectCorrectlyRounded(ops::LinearRelu(Bf16(x), Bf16(w), b16), ops::Relu(ops::Linear(x, w, b32)),
                           "LinearRelu" + c);
  }
}

TEST(Bf16Ops, LinearReluIsReluOfLinearInFloat32AndFloat64) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor x = testing::RandomTensor({17, 30}, dtype, 16), w = testing::RandomTensor({9, 30}, dtype, 17);
    const Tensor bias = testing::RandomTensor({9}, dtype, 18);
    const Tensor got = ops::LinearRelu(x, w, bias), want = ops::Relu(ops::Linear(x, w, bias));
    ExpectAllNear(testing::AsDoubles(got), testing::AsDoubles(want), 0.0, 0.0, DTypeName(dtype));
    int64_t zeros = 0;
    for (double v : testing::AsDoubles(got)) zeros += v == 0.0;
    EXPECT_GT(zeros, 0) << "the inputs should make some pre-activations negative";
  }
}

// --- Reductions ----------------------------------------------------------------------------------------

TEST(Bf16Ops, SumRowsIntoWritesOrAccumulatesTheColumnSumsInDouble) {
  for (const Shape& shape : {Shape{1, 5}, Shape{64, 10}, Shape{257, 300}}) {
    const int64_t rows = shape[0], cols = shape[1];
    const Tensor x = RandomBf16Values(shape, 19);
    const Tensor start = testing::RandomTensor({cols}, DType::kFloat32, 20);
    const std::vector<float> xv = Floats(x), sv = Floats(start);
    for (float beta : {0.f, 1.f, 0.5f}) {
      std::vector<double> want(cols);
      for (int64_t c = 0; c < cols; ++c) {
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += xv[r * cols + c];
        want[c] = static_cast<float>(acc + (beta == 0.f ? 0.0 : static_cast<double>(beta) * sv[c]));
      }
      const std::string c = absl::StrCat(ShapeToString(shape), " beta=", beta);
      // bfloat16 rows into a float32 bias gradient: the double sum rounded once to float32.
      Tensor out32 = start.Clone();
      ops::SumRowsInto(out32, Bf16(x), beta);
      ExpectAllNear(testing::AsDoubles(out32), want, 0.0, 0.0, "bf16 -> float32 " + c);
      // float32 in, float32 out: the same numbers.
      Tensor same = start.Clone();
      ops::SumRowsInto(same, x, beta);
      ExpectAllNear(testing::AsDoubles(same), want, 0.0, 0.0, "float32 -> float32 " + c);
      // bfloat16 out: the float32 result correctly rounded (beta reads the bf16 value of out).
      Tensor start16 = Bf16(start), want16 = ops::Cast(start16, DType::kFloat32);
      ops::SumRowsInto(want16, x, beta);
      ops::SumRowsInto(start16, Bf16(x), beta);
      ExpectCorrectlyRounded(start16, want16, "bf16 -> bf16 " + c);
    }
  }
}

TEST(Bf16Ops, SumMeanAndArgMaxMatchTheFloat32Ops) {
  const Tensor x = RandomBf16Values({37, 41}, 21);
  const Tensor h = Bf16(x);
  ExpectCorrectlyRounded(ops::Sum(h), ops::Sum(x), "Sum");
  ExpectCorrectlyRounded(ops::Mean(h), ops::Mean(x), "Mean");
  for (int64_t dim : {0, 1}) {
    for (bool keepdim : {false, true}) {
      const std::string c = absl::StrCat(" dim=", dim, " keepdim=", keepdim);
      ExpectCorrectlyRounded(ops::Sum(h, dim, keepdim), ops::Sum(x, dim, keepdim), "Sum" + c);
      ExpectCorrectlyRounded(ops::Mean(h, dim, keepdim), ops::Mean(x, dim, keepdim), "Mean" + c);
    }
  }
  EXPECT_EQ(ops::ArgMax(h).ToVector<int64_t>(), ops::ArgMax(x).ToVector<int64_t>());
}

// --- Losses --------------------------------------------------------------------------------------------

Tensor Labels(int64_t n, int64_t classes) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (i * 7 + 3) % classes;
  return Tensor::FromVector(v, {n});
}

TEST(Bf16Ops, CrossEntropyOfBf16LogitsIsComputedAndReturnedInFloat32) {
  for (const Shape& shape : {Shape{1, 10}, Shape{64, 10}, Shape{33, 1027}}) {
    const Tensor logits = RandomBf16Values(shape, 22, -6.0, 6.0), labels = Labels(shape[0], shape[1]);
    Tensor softmax32, softmax16;
    const Tensor loss32 = ops::CrossEntropy(logits, labels, &softmax32);
    const Tensor loss16 = ops::CrossEntropy(Bf16(logits), labels, &softmax16);
    ASSERT_EQ(loss16.dtype(), DType::kFloat32);
    ASSERT_EQ(softmax16.dtype(), DType::kFloat32);
    const std::string c = ShapeToString(shape);
    ExpectSameFloats(loss16, loss32, "loss " + c);
    ExpectSameFloats(softmax16, softmax32, "softmax " + c);

    const Tensor grad_loss = Tensor::FromVector(std::vector<float>{1.3f}, {});
    const Tensor grad32 = ops::CrossEntropyBackward(softmax32, labels, grad_loss);
    const Tensor grad16 = ops::CrossEntropyBackward(softmax16, labels, grad_loss, kBf16);
    ExpectCorrectlyRounded(grad16, grad32, "CrossEntropyBackward " + c);
  }
}

TEST(Bf16Ops, LogSoftmaxAndMseLossMatchTheFloat32Ops) {
  const Tensor x = RandomBf16Values({19, 77}, 23, -5.0, 5.0), y = RandomBf16Values({19, 77}, 24);
  ExpectCorrectlyRounded(ops::LogSoftmax(Bf16(x)), ops::LogSoftmax(x), "LogSoftmax");
  const Tensor mse = ops::MseLoss(Bf16(x), Bf16(y));
  ASSERT_EQ(mse.dtype(), DType::kFloat32) << "losses of bfloat16 inputs are float32";
  ExpectSameFloats(mse, ops::MseLoss(x, y), "MseLoss");
}

TEST(Bf16Ops, CastRoundTripsEveryBf16ValueAndRoundsFloat32ToNearestEven) {
  const Tensor x = RandomBf16Values({1001}, 25, -100.0, 100.0);
  ExpectSameFloats(ops::Cast(Bf16(x), DType::kFloat32), x, "bf16 values survive float32 -> bf16 -> float32");
  const Tensor f = testing::RandomTensor({1001}, DType::kFloat32, 26);
  Tensor h = Tensor::Empty({1001}, kBf16);
  ops::CastInto(h, f);
  ExpectCorrectlyRounded(h, f, "CastInto float32 -> bf16");
}

// --- Optimizer steps with bfloat16 gradients and copies ------------------------------------------------

struct MixedCase {
  std::vector<Tensor> params, grads32, grads16, state_a, state_b, copies;
};

/// Parameters of odd sizes, their gradients as float32 and as bfloat16 of the same values, zero state.
MixedCase MakeMixedCase(uint32_t seed) {
  MixedCase c;
  for (int64_t n : {1, 7, 1000, 4099}) {
    c.params.push_back(testing::RandomTensor({n}, DType::kFloat32, seed++));
    c.grads32.push_back(RandomBf16Values({n}, seed++));
    c.grads16.push_back(Bf16(c.grads32.back()));
    c.state_a.push_back(Tensor::Zeros({n}));
    c.state_b.push_back(Tensor::Zeros({n}));
    c.copies.push_back(Tensor::Full({n}, 7.0, kBf16));
  }
  return c;
}

/// The float32 master weights are the float32 step's, bit for bit; each copy is round(p_new), bit for bit.
void ExpectMixedStepMatches(const MixedCase& got, const MixedCase& want, const std::string& what) {
  for (size_t i = 0; i < got.params.size(); ++i) {
    const std::string c = absl::StrCat(what, " param ", i);
    ExpectSameFloats(got.params[i], want.params[i], c + " master weights");
    ExpectSameFloats(got.state_a[i], want.state_a[i], c + " state");
    ExpectSameFloats(got.state_b[i], want.state_b[i], c + " second state");
    const Tensor rounded = ops::Cast(got.params[i], kBf16);
    EXPECT_EQ(got.copies[i].ToVector<BFloat16>().size(), rounded.ToVector<BFloat16>().size());
    const std::vector<BFloat16> copy = got.copies[i].ToVector<BFloat16>(), round = rounded.ToVector<BFloat16>();
    int64_t misses = 0;
    for (size_t j = 0; j < copy.size(); ++j) misses += copy[j].bits != round[j].bits;
    EXPECT_EQ(misses, 0) << c << ": the bf16 copy is not round(p_new) in " << misses << " elements";
  }
}

TEST(Bf16Optim, SgdWithBf16GradsAndCopiesIsTheFloat32StepPlusRoundedCopies) {
  for (bool nesterov : {false, true}) {
    MixedCase got = MakeMixedCase(30), want = MakeMixedCase(30);
    ops::SgdConfig config{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = nesterov};
    for (int step = 0; step < 3; ++step) {
      config.first_step = step == 0;
      ops::SgdStep(absl::MakeSpan(want.params), want.grads32, absl::MakeSpan(want.state_a), config);
      ops::SgdStep(absl::MakeSpan(got.params), got.grads16, absl::MakeSpan(got.state_a), config,
                   absl::MakeSpan(got.copies));
    }
    ExpectMixedStepMatches(got, want, nesterov ? "nesterov" : "momentum");
  }
}

TEST(Bf16Optim, SgdWithFloat32GradsCanStillWriteBf16Copies) {
  MixedCase got = MakeMixedCase(40), want = MakeMixedCase(40);
  const ops::SgdConfig config{.lr = 0.1};
  ops::SgdStep(absl::MakeSpan(want.params), want.grads32, {}, config);
  ops::SgdStep(absl::MakeSpan(got.params), got.grads32, {}, config, absl::MakeSpan(got.copies));
  ExpectMixedStepMatches(got, want, "plain SGD");
}

TEST(Bf16Optim, AdamAndAdamWWithBf16GradsAndCopiesAreTheFloat32StepsPlusRoundedCopies) {
  for (bool decoupled : {true, false}) {
    MixedCase got = MakeMixedCase(50), want = MakeMixedCase(50);
    ops::AdamConfig config{.lr = 1e-2, .weight_decay = 0.1, .decoupled_weight_decay = decoupled};
    for (int64_t step = 1; step <= 3; ++step) {
      config.step = step;
      ops::AdamStep(absl::MakeSpan(want.params), want.grads32, absl::MakeSpan(want.state_a),
                    absl::MakeSpan(want.state_b), config);
      ops::AdamStep(absl::MakeSpan(got.params), got.grads16, absl::MakeSpan(got.state_a), absl::MakeSpan(got.state_b),
                    config, absl::MakeSpan(got.copies));
    }
    ExpectMixedStepMatches(got, want, decoupled ? "AdamW" : "Adam");
  }
}

// --- Misuse --------------------------------------------------------------------------------------------

TEST(Bf16OpsDeathTest, MatMulIntoAcceptsOnlyTheInputDTypeOrFloat32ForBf16Inputs) {
  const Tensor a = Tensor::Zeros({2, 3}, kBf16), b = Tensor::Zeros({3, 4}, kBf16);
  Tensor out64 = Tensor::Zeros({2, 4}, DType::kFloat64);
  EXPECT_DEATH(ops::MatMulInto(out64, a, b, false, false),
               "MatMulInto: out is \\[2, 4\\] float64 cpu but a is \\[2, 3\\] bfloat16 cpu");
  Tensor out16 = Tensor::Zeros({2, 4}, kBf16);
  EXPECT_DEATH(ops::MatMulInto(out16, Tensor::Zeros({2, 3}), Tensor::Zeros({3, 4}), false, false),
               "MatMulInto: out is \\[2, 4\\] bfloat16 cpu but a is \\[2, 3\\] float32 cpu");
  EXPECT_DEATH(ops::MatMul(a, Tensor::Zeros({3, 4})), "MatMul: a is .*bfloat16.* but b is .*float32");
}

TEST(Bf16OpsDeathTest, OptimizerCopiesNeedFloat32ParamsAndGradsShareOneDType) {
  std::vector<Tensor> params = {Tensor::Zeros({3}, DType::kFloat64)};
  std::vector<Tensor> grads = {Tensor::Zeros({3}, DType::kFloat64)};
  std::vector<Tensor> copies = {Tensor::Zeros({3}, kBf16)};
  EXPECT_DEATH(ops::SgdStep(absl::MakeSpan(params), grads, {}, {.lr = 0.1}, absl::MakeSpan(copies)),
               "SgdStep: bf16_copies\\[0\\] is \\[3\\] bfloat16 cpu but params\\[0\\] is \\[3\\] float64");
  std::vector<Tensor> params32 = {Tensor::Zeros({3}), Tensor::Zeros({2})};
  std::vector<Tensor> mixed_grads = {Tensor::Zeros({3}, kBf16), Tensor::Zeros({2})};
  EXPECT_DEATH(ops::SgdStep(absl::MakeSpan(params32), mixed_grads, {}, {.lr = 0.1}),
               "SgdStep: grads\\[1\\] is \\[2\\] float32 cpu but grads\\[0\\] is \\[3\\] bfloat16 cpu");
}

TEST(Bf16OpsDeathTest, CrossEntropyBackwardGivesBf16OnlyFromAFloat32Softmax) {
  const Tensor softmax = Tensor::Full({2, 3}, 1.0 / 3, DType::kFloat64), labels = Labels(2, 3);
  const Tensor grad_loss = Tensor::Full({}, 1.0, DType::kFloat64);
  EXPECT_DEATH(ops::CrossEntropyBackward(softmax, labels, grad_loss, kBf16),
               "CrossEntropyBackward: cannot return a bfloat16 gradient from softmax \\[2, 3\\] float64");
}

TEST(Bf16OpsDeathTest, SumRowsIntoNeedsOneEntryPerColumn) {
  Tensor out = Tensor::Zeros({4});
  EXPECT_DEATH(ops::SumRowsInto(out, Tensor::Zeros({3, 5}, kBf16)),
               "SumRowsInto: needs x \\[N, C\\] and out \\[C\\], got x \\[3, 5\\] bfloat16 cpu, out \\[4\\] float32");
}

}  // namespace
}  // namespace tinyddp
