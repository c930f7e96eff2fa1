// WeightGradDeferral: a backward split into B (input gradients now) and W (weight gradients later) leaves the same
// bits in .grad as the whole backward, accumulated over microbatches; hooks fire at W, not at B.
#include <cstring>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/weight_grad_deferral.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

Variable Param(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape));
  ops::UniformInit(t, -0.5, 0.5, seed);
  return Variable(t, /*requires_grad=*/true);
}

struct Net {
  Variable w1 = Param({7, 5}, 1), b1 = Param({7}, 2), w2 = Param({3, 7}, 3), b2 = Param({3}, 4);
  std::vector<Variable> params() const { return {w1, b1, w2, b2}; }
  // x [N, 5] -> the loss; `input` requires grad, as a pipeline stage's received activation does.
  Variable Loss(const Variable& input, const Tensor& labels) const {
    return CrossEntropy(Linear(LinearRelu(input, w1, b1), w2, b2), labels);
  }
};

TEST(WeightGradDeferral, BThenWInMicrobatchOrderGivesTheWholeBackwardsBits) {
  Net whole, split;
  int hooks_fired = 0;
  for (const Variable& p : split.params()) p.RegisterPostAccumulateGradHook([&](const Variable&) { ++hooks_fired; });
  const Tensor labels = Tensor::FromVector<int64_t>({0, 2, 1, 1}, {4});
  std::vector<std::vector<WeightGradWork>> deferred;
  std::vector<Tensor> input_grads;
  for (int k = 0; k < 3; ++k) {  // three microbatches, accumulated
    Tensor x = Tensor::Empty({4, 5});
    ops::UniformInit(x, -1, 1, 100 + k);
    const Variable a(x.Clone(), true), b(x.Clone(), true);
    Backward(whole.Loss(a, labels), Tensor::Full({}, 0.25 + k, DType::kFloat32));
    {
      WeightGradDeferral defer;
      Backward(split.Loss(b, labels), Tensor::Full({}, 0.25 + k, DType::kFloat32));
      deferred.push_back(defer.Take());
    }
    EXPECT_EQ(hooks_fired, 4 * k) << "B must not fire the weights' hooks";
    EXPECT_EQ(std::memcmp(a.grad().data<float>(), b.grad().data<float>(), a.grad().nbytes()), 0)
        << "B's input gradient differs";
    for (auto& work : deferred.back()) work();  // W k, right after B k here; the pipeline runs it later
  }
  EXPECT_EQ(hooks_fired, 12);
  for (size_t i = 0; i < 4; ++i) {
    const Tensor& g = whole.params()[i].grad();
    const Tensor& h = split.params()[i].grad();
    ASSERT_TRUE(h.defined());
    EXPECT_EQ(std::memcmp(g.data<float>(), h.data<float>(), g.nbytes()), 0) << "parameter " << i;
  }
}

TEST(WeightGradDeferral, LeavesDotGradUntouchedUntilWRuns) {
  Net net;
  const Tensor labels = Tensor::FromVector<int64_t>({1, 0}, {2});
  Tensor x = Tensor::Full({2, 5}, 0.3);
  std::vector<WeightGradWork> work;
  {
    WeightGradDeferral defer;
    Backward(net.Loss(Variable(x, true), labels));
    work = defer.Take();
  }
  for (const Variable& p : net.params()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(work.size(), 2u);  // one per Linear: its weight and its bias
  for (auto& w : work) w();
  for (const Variable& p : net.params()) EXPECT_TRUE(p.grad().defined());
}

}  // namespace
}  // namespace tinyddp::autograd
