// CheckTrainingData: the checks a training run makes on its data before building a model from it, so
// that data which parses but cannot train (an empty split, 1x1 training images beside 28x28 test
// images, splits that disagree on the classes) stops with one sentence naming the problem instead of
// an abort deep inside a matrix multiply or the learning-rate schedule.
//
// Sits beside the loaders (fashion_mnist.h, synthetic.h), which check each file on its own; this checks
// what only the pair can tell. The model is built from the training split's shape (input_size,
// num_classes), so agreeing splits are what "matches the model" means here.
#ifndef TINYDDP_DATA_DATASET_CHECK_H_
#define TINYDDP_DATA_DATASET_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "data/dataset.h"

namespace tinyddp::data {

/// OK when `train` has examples to train on and `test` has examples scored by the same model: the
/// same input size and number of classes, each split non-empty. Otherwise InvalidArgument naming the
/// split, both values and what to check; `where` (e.g. "--data_dir=/data/fmnist") says where the data
/// came from.
absl::Status CheckTrainingData(const Dataset& train, const Dataset& test, const std::string& where);

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_DATASET_CHECK_H_
