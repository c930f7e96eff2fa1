// Fashion-MNIST (and MNIST: same files, same format) as in-memory TensorDatasets.
//
// Reads an images file and a labels file with the IDX reader (idx.h), checks that they agree, and
// converts to what the MLP trains on: inputs float32 [N, rows*cols] = pixel / 255 (as torchvision's
// ToTensor), labels int64 in [0, 10). The default directory is where Debian's dataset-fashion-mnist
// package installs the four files:
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz   (60000 examples)
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz    (10000 examples)
// Uncompressed copies (the same names without .gz) are found too.
#ifndef TINYDDP_DATA_FASHION_MNIST_H_
#define TINYDDP_DATA_FASHION_MNIST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace tinyddp::data {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kFashionMnistClasses = 10;

/// Loads an IDX images file ([N, rows, cols] uint8) and labels file ([N] uint8) into a TensorDataset.
/// Errors name the file: anything ReadIdxFile reports, image and label counts that differ, or a label
/// >= num_classes.
absl::StatusOr<TensorDataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path,
                                             int64_t num_classes = kFashionMnistClasses);

/// The "train" (60000) or "test" (10000) split from `data_dir` (kDefaultFashionMnistDir when empty).
/// NotFound when the files are absent, naming the paths tried and how to get them: install the Debian
/// package dataset-fashion-mnist, or pass the folder that holds them (a program names its own flag for it:
/// ddp_mlp's --data_dir). InvalidArgument for any other split name.
absl::StatusOr<TensorDataset> LoadFashionMnist(const std::string& data_dir, absl::string_view split);

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_FASHION_MNIST_H_
