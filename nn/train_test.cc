// End to end on the CPU: an MLP trained with each optimizer on a synthetic classification problem (a
// random linear teacher labels random points) clearly learns it.
#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

struct Data {
  Tensor x, labels;
};

// 512 points in [-1, 1]^10, labelled by the argmax of a fixed random linear map to 4 classes.
Data MakeData() {
  Data d;
  d.x = Tensor::Empty({512, 10});
  ops::UniformInit(d.x, -1.0, 1.0, 100);
  Tensor teacher = Tensor::Empty({4, 10});
  ops::UniformInit(teacher, -1.0, 1.0, 101);
  d.labels = ops::ArgMax(ops::MatMul(d.x, teacher, false, true));
  return d;
}

double Accuracy(Module& model, const Data& d) {
  autograd::NoGradGuard no_grad;
  const std::vector<int64_t> predicted = ops::ArgMax(model(Variable(d.x)).data()).ToVector<int64_t>();
  const std::vector<int64_t> labels = d.labels.ToVector<int64_t>();
  int correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  return static_cast<double>(correct) / labels.size();
}

// Trains for `steps` full-batch steps; returns (first loss, last loss).
std::pair<double, double> Train(Module& model, Optimizer& optimizer, const Data& d, int steps) {
  CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    optimizer.ZeroGrad();
    const Variable loss = loss_fn(model(Variable(d.x)), d.labels);
    autograd::Backward(loss);
    optimizer.Step();
    (step == 0 ? first : last) = loss.data().Item();
  }
  return {first, last};
}

TEST(Training, MlpWithSgdMomentumLearnsASyntheticProblem) {
  const Data d = MakeData();
  auto model = MLP({10, 32, 4});
  SGD sgd(model->Parameters(), {.lr = 0.2, .momentum = 0.9});
  const auto [first, last] = Train(*model, sgd, d, 300);
  EXPECT_GT(first, 1.2);  // about log(4) at init
  EXPECT_LT(last, 0.3 * first);
  EXPECT_GT(Accuracy(*model, d), 0.9);
}

TEST(Training, MlpWithAdamWAndGeluLearnsASyntheticProblem) {
  const Data d = MakeData();
  MlpOptions options;
  options.activation = Activation::kGELU;
  auto model = MLP({10, 32, 32, 4}, options);
  AdamW adamw(model->Parameters(), AdamWOptions());
  adamw.set_lr(0.01);
  const auto [first, last] = Train(*model, adamw, d, 200);
  EXPECT_LT(last, 0.3 * first);
  EXPECT_GT(Accuracy(*model, d), 0.9);
}

}  // namespace
}  // namespace tinyddp::nn
