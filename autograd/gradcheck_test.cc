// gradcheck must be able to fail: it rejects a wrong backward, and it leaves inputs as it found them.
#include "autograd/gradcheck.h"

#include <vector>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

using Vars = std::vector<Variable>;

Variable Input(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kFloat64);
  ops::UniformInit(t, -1.0, 1.0, seed);
  return Variable(t, /*requires_grad=*/true);
}

// x * x with a backward that forgets the factor 2.
Variable BadSquare(const Variable& x) {
  const Tensor xd = x.data();
  return Record("BadSquare", ops::Mul(xd, xd), {x},
                [xd](const Tensor& g, const NeedsGrad&) -> Grads { return {ops::Mul(g, xd)}; });
}

TEST(GradCheck, RejectsABackwardThatIsOffByAFactor) {
  const absl::Status status = GradCheck([](const Vars& v) { return BadSquare(v[0]); }, {Input({3, 4}, 1)});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("element 0"), std::string::npos) << status.message();
}

TEST(GradCheck, AcceptsTheCorrectBackwardOfTheSameFunction) {
  const absl::Status status = GradCheck([](const Vars& v) { return v[0] * v[0]; }, {Input({3, 4}, 1)});
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(GradCheck, LeavesDataAndGradientsAsItFoundThem) {
  const Variable x = Input({2, 5}, 2);
  const std::vector<double> data_before = x.data().ToVector<double>();
  const Tensor grad_before = Tensor::Full({2, 5}, 0.25, DType::kFloat64);
  x.set_grad(grad_before);
  ASSERT_TRUE(GradCheck([](const Vars& v) { return Gelu(v[0]); }, {x}).ok());
  EXPECT_EQ(x.data().ToVector<double>(), data_before);
  EXPECT_EQ(x.grad().data_ptr(), grad_before.data_ptr());
  for (double v : x.grad().ToVector<double>()) EXPECT_EQ(v, 0.25);
}

TEST(GradCheck, RejectsFloat32Inputs) {
  Tensor t = Tensor::Empty({3});
  ops::UniformInit(t, -1.0, 1.0, 3);
  const absl::Status status = GradCheck([](const Vars& v) { return Relu(v[0]); }, {Variable(t, true)});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("float64"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace tinyddp::autograd
