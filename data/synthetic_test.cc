// The synthetic dataset is a pure function of its options, its classes are all populated, and it is
// learnable: a linear softmax model trained on "train" scores far above chance on "test", which is only
// possible because both splits share one teacher.
#include "data/synthetic.h"

#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace tinyddp::data {
namespace {

TensorDataset Make(const SyntheticOptions& o, const char* split) {
  absl::StatusOr<TensorDataset> ds = MakeSyntheticDataset(o, split);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return *ds;
}

TEST(Synthetic, SameOptionsGiveBitIdenticalData) {
  const SyntheticOptions o{.num_examples = 517, .input_size = 29, .num_classes = 7, .teacher_hidden = 13, .seed = 5};
  TensorDataset a = Make(o, "train"), b = Make(o, "train");
  EXPECT_EQ(a.inputs().ToVector<float>(), b.inputs().ToVector<float>());
  EXPECT_EQ(a.labels().ToVector<int64_t>(), b.labels().ToVector<int64_t>());
  EXPECT_EQ(a.inputs().shape(), Shape({517, 29}));
  EXPECT_EQ(a.num_classes(), 7);
}

TEST(Synthetic, SeedsAndSplitsDrawDifferentInputs) {
  SyntheticOptions o{.num_examples = 300, .input_size = 17, .num_classes = 5, .teacher_hidden = 9, .seed = 1};
  const std::vector<float> train = Make(o, "train").inputs().ToVector<float>();
  const std::vector<float> test = Make(o, "test").inputs().ToVector<float>();
  o.seed = 2;
  const std::vector<float> other_seed = Make(o, "train").inputs().ToVector<float>();
  int same_test = 0, same_seed = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    same_test += train[i] == test[i];
    same_seed += train[i] == other_seed[i];
  }
  EXPECT_LT(same_test, 5);
  EXPECT_LT(same_seed, 5);
}

TEST(Synthetic, EveryClassGetsAFairShare) {
  const SyntheticOptions o{.num_examples = 8000, .input_size = 784, .num_classes = 10, .teacher_hidden = 64, .seed = 3};
  std::vector<int64_t> count(10, 0);
  for (int64_t y : Make(o, "train").labels().ToVector<int64_t>()) ++count[y];
  for (int c = 0; c < 10; ++c) {
    EXPECT_GT(count[c], 8000 / 10 / 4) << "class " << c;  // at least a quarter of a uniform share
  }
}

// Full-batch gradient descent of softmax regression, with the tensor ops only.
double TrainLinearAndScore(const TensorDataset& train, const TensorDataset& test, int steps, double lr) {
  const int64_t c = train.num_classes(), d = train.input_size();
  Tensor w = Tensor::Zeros({c, d});
  Tensor b = Tensor::Zeros({c});
  const Tensor one = Tensor::Full({}, 1.0);
  for (int step = 0; step < steps; ++step) {
    Tensor softmax;
    ops::CrossEntropy(ops::Linear(train.inputs(), w, b), train.labels(), &softmax);
    Tensor grad = ops::CrossEntropyBackward(softmax, train.labels(), one);  // [N, C], already / N
    ops::AddInto(w, ops::MatMul(grad, train.inputs(), /*trans_a=*/true), -lr);
    ops::AddInto(b, ops::Sum(grad, 0), -lr);
  }
  const std::vector<int64_t> predicted = ops::ArgMax(ops::Linear(test.inputs(), w, b)).ToVector<int64_t>();
  const std::vector<int64_t> truth = test.labels().ToVector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  return static_cast<double>(correct) / truth.size();
}

TEST(Synthetic, ALinearModelTrainedOnTrainScoresFarAboveChanceOnTest) {
  const SyntheticOptions o{.num_examples = 4000, .input_size = 24, .num_classes = 4, .teacher_hidden = 16, .seed = 9};
  const double accuracy = TrainLinearAndScore(Make(o, "train"), Make(o, "test"), 300, 0.5);
  EXPECT_GT(accuracy, 0.6) << "chance is about 0.25";
}

TEST(Synthetic, RejectsBadOptions) {
  EXPECT_FALSE(MakeSyntheticDataset({.num_examples = 0}, "train").ok());
  EXPECT_FALSE(MakeSyntheticDataset({.num_classes = 1}, "train").ok());
  EXPECT_FALSE(MakeSyntheticDataset({.num_examples = 10}, "val").ok());
}

}  // namespace
}  // namespace tinyddp::data
