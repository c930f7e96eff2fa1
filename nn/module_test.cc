// Module, Linear, Sequential and MLP: PyTorch's names, order, shapes and default init.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "gtest/gtest.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

TEST(MLP, NamesAndShapesFollowPyTorchSequential) {
  auto model = MLP({784, 33, 17, 10});
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (auto& [name, p] : model->NamedParameters()) {
    names.push_back(name);
    shapes.push_back(p.shape());
    EXPECT_EQ(p.name(), name) << "the Variable carries its dotted name";
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{{33, 784}, {33}, {17, 33}, {17}, {10, 17}, {10}}));
  EXPECT_EQ(model->NumParameters(), 784 * 33 + 33 + 33 * 17 + 17 + 17 * 10 + 10);
  EXPECT_EQ(model->size(), 5u);
}

TEST(MLP, ReprMatchesPyTorch) {
  MlpOptions options;
  options.activation = Activation::kGELU;
  EXPECT_EQ(MLP({4, 3, 2}, options)->ToString(),
            "Sequential(\n"
            "  (0): Linear(in_features=4, out_features=3, bias=True)\n"
            "  (1): GELU(approximate='tanh')\n"
            "  (2): Linear(in_features=3, out_features=2, bias=True)\n"
            ")");
}

TEST(Linear, InitIsUniformWithinOneOverSqrtFanInForWeightAndBias) {
  const int64_t in = 300, out = 200;
  Linear layer(in, out, {});
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  for (const Variable& p : {layer.weight(), layer.bias()}) {
    const std::vector<float> v = p.data().ToVector<float>();
    double lo = 1, hi = -1, mean = 0;
    for (float x : v) {
      EXPECT_LE(std::abs(x), bound);
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
      mean += x / v.size();
    }
    // Uniform over the whole interval, not a narrower or shifted one.
    EXPECT_LT(lo, -0.9 * bound);
    EXPECT_GT(hi, 0.9 * bound);
    EXPECT_NEAR(mean, 0.0, 0.1 * bound);
  }
}

TEST(MLP, InitIsAFunctionOfTheSeedWithOnePhiloxRangePerLayer) {
  MlpOptions options;
  options.seed = 7;
  auto a = MLP({5, 4, 3}, options), b = MLP({5, 4, 3}, options);
  options.seed = 8;
  auto c = MLP({5, 4, 3}, options);
  const auto pa = a->Parameters(), pb = b->Parameters(), pc = c->Parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].data().ToVector<float>(), pb[i].data().ToVector<float>());
    EXPECT_NE(pa[i].data().ToVector<float>(), pc[i].data().ToVector<float>());
  }
  // Layer 2 continues the stream where layer 0 stopped: weight at counter 4*5+4 = 24.
  Tensor expected = Tensor::Empty({3, 4});
  ops::UniformInit(expected, -0.5, 0.5, 7, 24);  // bound 1/sqrt(4)
  EXPECT_EQ(pa[2].data().ToVector<float>(), expected.ToVector<float>());
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  auto model = MLP({3, 4, 2});
  model->Eval();
  for (const auto& [name, child] : model->Children()) EXPECT_FALSE(child->is_training()) << name;
  model->Train();
  for (const auto& [name, child] : model->Children()) EXPECT_TRUE(child->is_training()) << name;
}

TEST(Module, ZeroGradAndStateDictCoverAllParameters) {
  auto model = MLP({3, 4, 2});
  Tensor x = Tensor::Empty({5, 3});
  ops::UniformInit(x, -1, 1, 3);
  autograd::Backward(CrossEntropyLoss()((*model)(Variable(x)), Tensor::FromVector<int64_t>({0, 1, 1, 0, 1}, {5})));
  for (const Variable& p : model->Parameters()) EXPECT_TRUE(p.grad().defined());
  model->ZeroGrad();
  for (const Variable& p : model->Parameters()) EXPECT_FALSE(p.grad().defined());

  const auto state = model->StateDict();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[2].first, "2.weight");
  EXPECT_EQ(state[2].second.data_ptr(), model->Parameters()[2].data().data_ptr()) << "state_dict holds the tensors";
}

TEST(Module, NestedSequentialPrefixesNamesAtEveryLevel) {
  auto inner = MLP({2, 3, 2});
  Sequential outer;
  outer.Append(std::make_shared<Linear>(4, 2));
  outer.Append(inner);
  std::vector<std::string> names;
  for (auto& [name, p] : outer.NamedParameters()) {
    names.push_back(name);
    EXPECT_EQ(p.name(), name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.0.weight", "1.0.bias", "1.2.weight", "1.2.bias"}));
}

TEST(Module, ForwardOfMlpIsLinearReluLinear) {
  auto model = MLP({3, 4, 2});
  Tensor x = Tensor::Empty({6, 3});
  ops::UniformInit(x, -1, 1, 5);
  const auto p = model->Parameters();
  const Tensor expected =
      ops::Linear(ops::Relu(ops::Linear(x, p[0].data(), p[1].data())), p[2].data(), p[3].data());
  EXPECT_EQ((*model)(Variable(x)).data().ToVector<float>(), expected.ToVector<float>());
}

}  // namespace
}  // namespace tinyddp::nn
