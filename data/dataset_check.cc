// CheckTrainingData: see dataset_check.h.
#include "data/dataset_check.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tinyddp::data {
namespace {

// "784 values (28x28 images?)" for a square count, which is how image data usually goes wrong.
std::string Features(int64_t n) {
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  if (side > 0 && side * side == n) return absl::StrCat(n, " values (", side, "x", side, " images?)");
  return absl::StrCat(n, " values");
}

}  // namespace

absl::Status CheckTrainingData(const Dataset& train, const Dataset& test, const std::string& where) {
  const std::string from = absl::StrCat(" (data from ", where, ")");
  if (train.Size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training split has no examples, so there is nothing to train on", from,
                     "; check that the training files are the full ones"));
  }
  if (test.Size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the test split has no examples, so the run could not be evaluated", from, "; check the test files"));
  }
  if (train.input_size() != test.input_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the splits disagree on the input: each training example has ", Features(train.input_size()),
        " but each test example has ", Features(test.input_size()), from,
        "; the model is built for the training shape, so both splits must come from the same dataset"));
  }
  if (train.num_classes() != test.num_classes()) {
    return absl::InvalidArgumentError(absl::StrCat("the splits disagree on the classes: ", train.num_classes(),
                                                   " in training, ", test.num_classes(), " in test", from));
  }
  if (train.input_size() < 1 || train.num_classes() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("a classifier needs at least 1 input value and 2 classes; the "
                                                   "data has ", train.input_size(), " and ", train.num_classes(),
                                                   from));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::data
