// Every differentiable op in autograd/functions.h passes gradcheck (finite differences, float64, CPU)
// on random inputs of odd, non-trivial shapes, with respect to every input.
#include "autograd/functions.h"

#include <vector>

#include "autograd/gradcheck.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

using Vars = std::vector<Variable>;

// A float64 leaf requiring grad with uniform values in [low, high).
Variable Input(Shape shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kFloat64);
  ops::UniformInit(t, low, high, seed);
  return Variable(t, /*requires_grad=*/true);
}

// Values in +-[0.2, 1.2): away from zero, where ReLU has its kink and division blows up.
Variable AwayFromZero(Shape shape, uint64_t seed) {
  Variable v = Input(std::move(shape), seed, -1.0, 1.0);
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] = (p[i] < 0 ? -0.2 : 0.2) + p[i];
  return v;
}

void ExpectGradCheck(const GradCheckFn& f, const Vars& inputs) {
  const absl::Status status = GradCheck(f, inputs);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(GradCheck, LinearWithBias) {
  ExpectGradCheck([](const Vars& v) { return Linear(v[0], v[1], v[2]); },
                   (Vars{Input({5, 7}, 1), Input({3, 7}, 2), Input({3}, 3)}));
}

TEST(GradCheck, LinearWithoutBias) {
  ExpectGradCheck([](const Vars& v) { return Linear(v[0], v[1], Variable()); },
                   (Vars{Input({4, 6}, 4), Input({9, 6}, 5)}));
}

TEST(GradCheck, LinearWithDataInputThatNeedsNoGradient) {
  const Variable x(Input({5, 7}, 6).data());  // requires_grad = false, like a data batch
  ExpectGradCheck([x](const Vars& v) { return Linear(x, v[0], v[1]); }, (Vars{Input({3, 7}, 7), Input({3}, 8)}));
}

TEST(GradCheck, LinearReluWithAndWithoutBias) {
  // Inputs away from zero are not enough here (the kink is in x w^T + b), but random float64 values put
  // no pre-activation within gradcheck's step of 0.
  ExpectGradCheck([](const Vars& v) { return LinearRelu(v[0], v[1], v[2]); },
                   (Vars{Input({5, 7}, 90), Input({6, 7}, 91), Input({6}, 92)}));
  ExpectGradCheck([](const Vars& v) { return LinearRelu(v[0], v[1], Variable()); },
                   (Vars{Input({4, 3}, 93), Input({5, 3}, 94)}));
}

TEST(GradCheck, MatMulWithEveryTransposeCombination) {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      // op(a) is [5, 4], op(b) is [4, 3].
      const Variable a = ta ? Input({4, 5}, 10 + ta) : Input({5, 4}, 10 + ta);
      const Variable b = tb ? Input({3, 4}, 20 + tb) : Input({4, 3}, 20 + tb);
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      ExpectGradCheck([ta, tb](const Vars& v) { return MatMul(v[0], v[1], ta, tb); }, (Vars{a, b}));
    }
  }
}

TEST(GradCheck, AddSubMulDiv) {
  const Vars ab = {Input({3, 5}, 30), AwayFromZero({3, 5}, 31)};
  ExpectGradCheck([](const Vars& v) { return Add(v[0], v[1]); }, ab);
  ExpectGradCheck([](const Vars& v) { return Sub(v[0], v[1]); }, ab);
  ExpectGradCheck([](const Vars& v) { return Mul(v[0], v[1]); }, ab);
  ExpectGradCheck([](const Vars& v) { return Div(v[0], v[1]); }, ab);
}

TEST(GradCheck, SameVariableOnBothSides) {
  const Vars x = {Input({2, 3, 4}, 32)};
  ExpectGradCheck([](const Vars& v) { return v[0] * v[0] + v[0]; }, x);
}

TEST(GradCheck, Scale) {
  ExpectGradCheck([](const Vars& v) { return Scale(v[0], -2.5); }, (Vars{Input({7}, 33)}));
}

TEST(GradCheck, AddRowVector) {
  ExpectGradCheck([](const Vars& v) { return AddRowVector(v[0], v[1]); }, (Vars{Input({6, 5}, 34), Input({5}, 35)}));
}

TEST(GradCheck, View) {
  ExpectGradCheck([](const Vars& v) { return View(v[0], {5, -1}) * View(v[1], {5, 6}); },
                   (Vars{Input({3, 10}, 36), Input({30}, 37)}));
}

TEST(GradCheck, ReluAndGelu) {
  const Vars x = {AwayFromZero({4, 9}, 40)};
  ExpectGradCheck([](const Vars& v) { return Relu(v[0]); }, x);
  ExpectGradCheck([](const Vars& v) { return Gelu(v[0]); }, (Vars{Input({4, 9}, 41, -3.0, 3.0)}));
}

TEST(GradCheck, SumAndMeanOfAllElements) {
  ExpectGradCheck([](const Vars& v) { return Sum(v[0]); }, (Vars{Input({3, 5, 2}, 50)}));
  ExpectGradCheck([](const Vars& v) { return Mean(v[0]); }, (Vars{Input({7, 3}, 51)}));
}

TEST(GradCheck, SumAndMeanAlongEachDim) {
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(testing::Message() << "dim=" << dim << " keepdim=" << keepdim);
      const Vars x = {Input({3, 4, 5}, 52 + dim)};
      ExpectGradCheck([dim, keepdim](const Vars& v) { return Sum(v[0], dim, keepdim); }, x);
      ExpectGradCheck([dim, keepdim](const Vars& v) { return Mean(v[0], dim, keepdim); }, x);
    }
  }
}

TEST(GradCheck, LogSoftmax) {
  ExpectGradCheck([](const Vars& v) { return LogSoftmax(v[0]); }, (Vars{Input({5, 7}, 60, -3.0, 3.0)}));
}

TEST(GradCheck, CrossEntropy) {
  const Tensor labels = Tensor::FromVector<int64_t>({4, 0, 2, 2, 1, 3}, {6});
  ExpectGradCheck([labels](const Vars& v) { return CrossEntropy(v[0], labels); },
                   (Vars{Input({6, 5}, 61, -3.0, 3.0)}));
}

TEST(GradCheck, MseLossWithRespectToBothSides) {
  ExpectGradCheck([](const Vars& v) { return MseLoss(v[0], v[1]); }, (Vars{Input({4, 3}, 62), Input({4, 3}, 63)}));
}

TEST(GradCheck, WholeMlpWithCrossEntropy) {
  const Variable x(Input({5, 6}, 70).data());
  const Tensor labels = Tensor::FromVector<int64_t>({1, 0, 2, 2, 1}, {5});
  ExpectGradCheck(
      [x, labels](const Vars& v) { return CrossEntropy(Linear(Gelu(Linear(x, v[0], v[1])), v[2], v[3]), labels); },
      (Vars{Input({8, 6}, 71), Input({8}, 72), Input({3, 8}, 73), Input({3}, 74)}));
}

TEST(Functions, ForwardValuesMatchTheTensorOps) {
  // The autograd layer adds recording only: values are exactly those of tensor/ops.h.
  const Variable x = Input({4, 3}, 80), w = Input({5, 3}, 81), b = Input({5}, 82);
  EXPECT_EQ(Linear(x, w, b).data().ToVector<double>(), ops::Linear(x.data(), w.data(), b.data()).ToVector<double>());
  EXPECT_EQ(LinearRelu(x, w, b).data().ToVector<double>(),
            ops::LinearRelu(x.data(), w.data(), b.data()).ToVector<double>());
  EXPECT_EQ(LinearRelu(x, w, b).data().ToVector<double>(), Relu(Linear(x, w, b)).data().ToVector<double>());
  EXPECT_EQ(Gelu(x).data().ToVector<double>(), ops::Gelu(x.data()).ToVector<double>());
  EXPECT_EQ(Mean(x, 0).data().ToVector<double>(), ops::Mean(x.data(), 0).ToVector<double>());
}

}  // namespace
}  // namespace tinyddp::autograd
