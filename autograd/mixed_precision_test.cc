// The autograd half of bf16 mixed precision (nn/precision.h), on the CPU: Linear computing with
// bfloat16 stand-ins for float32 parameters gives float32 parameter gradients (written straight into
// the engine's slots) and bfloat16 input gradients; Cast and the losses carry dtypes across. Inputs are
// random values that bfloat16 holds exactly, so every expectation is a float32 computation on the same
// numbers.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tensor/testing/bf16_test_util.h"

namespace tinyddp::autograd {
namespace {

using testing::ExpectCorrectlyRounded;
using testing::Floats;
using testing::RandomBf16Values;

Tensor Bf16(const Tensor& t) { return ops::Cast(t, DType::kBFloat16); }
Tensor F32(const Tensor& t) { return ops::Cast(t, DType::kFloat32); }

void ExpectNear(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = Floats(got), w = Floats(want);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], 1e-6 + rel * std::abs(w[i])) << what << " element " << i;
  }
}

// A layer of odd sizes: x [37, 29] bfloat16 (an activation), float32 master weight [19, 29] and bias
// [19] with bfloat16 stand-ins, and a bfloat16 gradient for the output.
struct MixedLayer {
  Variable x, w, b;
  LinearValues values;
  Tensor dy;
  explicit MixedLayer(uint32_t seed) {
    x = Variable(Bf16(RandomBf16Values({37, 29}, seed)), /*requires_grad=*/true);
    w = Variable(RandomBf16Values({19, 29}, seed + 1), /*requires_grad=*/true, "w");
    b = Variable(RandomBf16Values({19}, seed + 2), /*requires_grad=*/true, "b");
    values = {Bf16(w.data()), Bf16(b.data())};  // exact: the masters hold bfloat16 values
    dy = Bf16(RandomBf16Values({37, 19}, seed + 3));
  }
};

TEST(MixedLinear, ParameterGradientsAreFloat32AndTheInputGradientBfloat16) {
  MixedLayer l(1);
  const Variable y = Linear(l.x, l.w, l.b, l.values);
  ASSERT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_EQ(Floats(y.data()), Floats(ops::Linear(l.x.data(), l.values.weight, l.values.bias)));
  Backward(y, l.dy);
  ASSERT_EQ(l.w.grad().dtype(), DType::kFloat32);
  ASSERT_EQ(l.b.grad().dtype(), DType::kFloat32);
  ASSERT_EQ(l.x.grad().dtype(), DType::kBFloat16);
  // dW = dy^T x and db = colsum(dy) in float32, never rounded to bfloat16 on the way.
  ExpectNear(l.w.grad(), ops::MatMul(F32(l.dy), F32(l.x.data()), true, false), 1e-6, "dW");
  ExpectNear(l.b.grad(), ops::Sum(F32(l.dy), 0), 1e-6, "db");
  // dx = dy @ W, the float32 product rounded once.
  ExpectCorrectlyRounded(l.x.grad(), ops::MatMul(F32(l.dy), l.w.data()), "dx");
}

TEST(MixedLinear, WritesFloat32GradientsIntoTheGradientDestinationsThenAddsIntoThem) {
  MixedLayer l(2);
  Tensor w_dest = Tensor::Full({19, 29}, 123.0), b_dest = Tensor::Full({19}, 123.0);  // stale values: overwritten
  l.w.set_grad_destination(w_dest);
  l.b.set_grad_destination(b_dest);
  Backward(Linear(l.x, l.w, l.b, l.values), l.dy);
  EXPECT_TRUE(l.w.grad().SharesStorageWith(w_dest)) << "the GEMM wrote the destination itself";
  EXPECT_TRUE(l.b.grad().SharesStorageWith(b_dest));
  const Tensor dw = ops::MatMul(F32(l.dy), F32(l.x.data()), true, false), db = ops::Sum(F32(l.dy), 0);
  ExpectNear(w_dest, dw, 1e-6, "dW in the destination");
  ExpectNear(b_dest, db, 1e-6, "db in the destination");
  // A second backward accumulates in place (beta = 1), as over micro-batches.
  Backward(Linear(l.x, l.w, l.b, l.values), l.dy);
  EXPECT_TRUE(l.w.grad().SharesStorageWith(w_dest));
  ExpectNear(w_dest, ops::Scale(dw, 2.0), 1e-6, "dW accumulated");
  ExpectNear(b_dest, ops::Scale(db, 2.0), 1e-6, "db accumulated");
}

TEST(MixedLinear, LinearReluIsReluOfLinearInValueAndGradients) {
  MixedLayer fused(3), split(3);
  const Variable y_fused = LinearRelu(fused.x, fused.w, fused.b, fused.values);
  const Variable y_split = Relu(Linear(split.x, split.w, split.b, split.values));
  ASSERT_EQ(Floats(y_fused.data()), Floats(y_split.data()));
  Backward(y_fused, fused.dy);
  Backward(y_split, split.dy);
  EXPECT_EQ(Floats(fused.x.grad()), Floats(split.x.grad()));
  EXPECT_EQ(fused.w.grad().ToVector<float>(), split.w.grad().ToVector<float>());
  EXPECT_EQ(fused.b.grad().ToVector<float>(), split.b.grad().ToVector<float>());
}

TEST(MixedLinear, ValuesOfTheWrongShapeStopWithAMessage) {
  MixedLayer l(4);
  const LinearValues transposed{Bf16(Tensor::Zeros({29, 19})), l.values.bias};
  EXPECT_DEATH(Linear(l.x, l.w, l.b, transposed), "values.weight must have the weight's shape \\[19, 29\\]");
  EXPECT_DEATH(LinearRelu(l.x, l.w, l.b, {l.values.weight, Tensor()}), "values.bias must be defined exactly");
}

TEST(Cast, GivesTheGradientBackInTheInputsDtype) {
  const Variable x(RandomBf16Values({5, 13}, 5), /*requires_grad=*/true);
  const Variable y = Cast(x, DType::kBFloat16);
  ASSERT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_EQ(Floats(y.data()), x.data().ToVector<float>());  // bfloat16-exact values survive
  const Tensor seed = Bf16(RandomBf16Values({5, 13}, 6));
  Backward(y, seed);
  ASSERT_EQ(x.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(x.grad().ToVector<float>(), Floats(seed));
}

TEST(Losses, CrossEntropyOfBfloat16LogitsIsFloat32WithABfloat16Gradient) {
  const Tensor logits32 = RandomBf16Values({11, 7}, 7, -4.0, 4.0);
  const Tensor labels = Tensor::FromVector<int64_t>({6, 0, 2, 2, 1, 3, 5, 4, 0, 6, 1}, {11});
  const Variable logits(Bf16(logits32), /*requires_grad=*/true);
  const Variable loss = CrossEntropy(logits, labels);
  ASSERT_EQ(loss.dtype(), DType::kFloat32);
  const Variable reference_logits(logits32, /*requires_grad=*/true);
  const Variable reference = CrossEntropy(reference_logits, labels);
  EXPECT_NEAR(loss.data().Item(), reference.data().Item(), 1e-6);
  Backward(loss);
  Backward(reference);
  ExpectCorrectlyRounded(logits.grad(), reference_logits.grad(), "d loss / d logits");
}

TEST(Losses, MseLossAndLogSoftmaxOfBfloat16GiveBfloat16Gradients) {
  const Variable a(Bf16(RandomBf16Values({6, 5}, 8)), true), b(Bf16(RandomBf16Values({6, 5}, 9)), true);
  const Variable mse = MseLoss(a, b);
  ASSERT_EQ(mse.dtype(), DType::kFloat32);
  Backward(mse);
  ASSERT_EQ(a.grad().dtype(), DType::kBFloat16);
  ASSERT_EQ(b.grad().dtype(), DType::kBFloat16);
  const std::vector<float> ga = Floats(a.grad()), gb = Floats(b.grad()), va = Floats(a.data()), vb = Floats(b.data());
  for (size_t i = 0; i < ga.size(); ++i) {
    const float want = 2.f * (va[i] - vb[i]) / 30.f;
    EXPECT_NEAR(ga[i], want, 0.01 * std::abs(want) + 1e-6) << i;  // a few bfloat16 roundings
    EXPECT_EQ(gb[i], -ga[i]) << i;
  }
  const Variable x(Bf16(RandomBf16Values({4, 9}, 10, -3.0, 3.0)), true);
  const Variable y = LogSoftmax(x);
  ASSERT_EQ(y.dtype(), DType::kBFloat16);
  Backward(y, Bf16(RandomBf16Values({4, 9}, 11)));
  EXPECT_EQ(x.grad().dtype(), DType::kBFloat16);
}

}  // namespace
}  // namespace tinyddp::autograd
