// CheckTrainingData refuses the pairs of splits that used to abort a run (an empty training split, 1x1
// training images beside 28x28 test images, different class counts) with a sentence naming both values,
// and passes a pair that trains.
#include "data/dataset_check.h"

#include <string>

#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace tinyddp::data {
namespace {

TensorDataset Split(int64_t n, int64_t features, int64_t classes) {
  std::vector<float> inputs(static_cast<size_t>(n * features));
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>((i * 37) % 101) / 101.f;
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7) % classes);
  return TensorDataset::Create(Tensor::FromVector<float>(inputs, {n, features}),
                               Tensor::FromVector<int64_t>(labels, {n}), classes)
      .value();
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(CheckTrainingData, AMatchingPairPasses) {
  EXPECT_TRUE(CheckTrainingData(Split(13, 784, 10), Split(5, 784, 10), "--data_dir=d").ok());
  EXPECT_TRUE(CheckTrainingData(Split(1, 3, 2), Split(1, 3, 2), "x").ok());
}

TEST(CheckTrainingData, OneByOneTrainingImagesBesideTwentyEightSquaredTestImagesAreNamed) {
  const absl::Status s = CheckTrainingData(Split(17, 1, 10), Split(6, 784, 10), "--data_dir=/tmp/bad");
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(Message(s).find("each training example has 1 values (1x1 images?) but each test example has 784 "
                            "values (28x28 images?) (data from --data_dir=/tmp/bad)"),
            std::string::npos)
      << s;
}

TEST(CheckTrainingData, EmptySplitsAndClassMismatchesAreNamed) {
  const absl::Status empty = CheckTrainingData(Split(0, 784, 10), Split(6, 784, 10), "d");
  EXPECT_NE(Message(empty).find("the training split has no examples"), std::string::npos) << empty;
  const absl::Status no_test = CheckTrainingData(Split(6, 784, 10), Split(0, 784, 10), "d");
  EXPECT_NE(Message(no_test).find("the test split has no examples"), std::string::npos) << no_test;
  const absl::Status classes = CheckTrainingData(Split(6, 12, 10), Split(6, 12, 5), "d");
  EXPECT_NE(Message(classes).find("disagree on the classes: 10 in training, 5 in test"), std::string::npos) << classes;
}

}  // namespace
}  // namespace tinyddp::data
