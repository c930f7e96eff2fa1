// Fashion-MNIST splits: locate the files, read both, check they agree, convert pixels to float32.
#include "data/fashion_mnist.h"

#include <sys/stat.h>

#include <array>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "data/idx.h"

namespace tinyddp::data {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// "<dir>/<stem>.gz" if present, else "<dir>/<stem>"; NotFound listing both otherwise.
absl::StatusOr<std::string> FindFile(const std::string& dir, const std::string& stem) {
  const std::string plain = absl::StrCat(dir, "/", stem);
  const std::string gz = absl::StrCat(plain, ".gz");
  if (IsFile(gz)) return gz;
  if (IsFile(plain)) return plain;
  return absl::NotFoundError(absl::StrCat(
      "Fashion-MNIST not found: neither ", gz, " nor ", plain,
      " exists. Install the Debian package dataset-fashion-mnist (sudo apt-get install "
      "dataset-fashion-mnist, which puts the files in ",
      kDefaultFashionMnistDir, "), or put the four IDX files in a folder of your own and load them from there "
      "(LoadFashionMnist's data_dir)."));
}

}  // namespace

absl::StatusOr<TensorDataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path,
                                             int64_t num_classes) {
  absl::StatusOr<IdxArray> images = ReadIdxFile(images_path, 3);
  RETURN_IF_ERROR(images);
  absl::StatusOr<IdxArray> labels = ReadIdxFile(labels_path, 1);
  RETURN_IF_ERROR(labels);
  const int64_t n = images->dims[0];
  const int64_t pixels = images->dims[1] * images->dims[2];
  if (labels->dims[0] != n) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", n, " images but ", labels_path, " holds ",
                                            labels->dims[0], " labels; they must come in pairs"));
  }

  // Labels first: a bad one should stop us before the big conversion.
  Tensor y = Tensor::Empty({n}, DType::kInt64);
  int64_t* y_data = y.data<int64_t>();
  const uint8_t* raw_labels = labels->data();
  for (int64_t i = 0; i < n; ++i) {
    if (raw_labels[i] >= num_classes) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{raw_labels[i]}, " of example ", i,
                                              " is not a class in [0, ", num_classes, ")"));
    }
    y_data[i] = raw_labels[i];
  }

  // pixel / 255 through a 256-entry table: the same float as a division (what torchvision's ToTensor
  // computes), at the cost of a lookup. 47 million pixels take a few tens of milliseconds.
  std::array<float, 256> scale;
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  Tensor x = Tensor::Empty({n, pixels}, DType::kFloat32);
  float* x_data = x.data<float>();
  const uint8_t* raw_pixels = images->data();
  const int64_t total = n * pixels;
  for (int64_t i = 0; i < total; ++i) x_data[i] = scale[raw_pixels[i]];

  return TensorDataset::Create(std::move(x), std::move(y), num_classes);
}

absl::StatusOr<TensorDataset> LoadFashionMnist(const std::string& data_dir, absl::string_view split) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("Fashion-MNIST: unknown split \"", split,
                                                   "\"; use \"train\" or \"test\""));
  }
  const std::string dir = data_dir.empty() ? kDefaultFashionMnistDir : data_dir;
  absl::StatusOr<std::string> images = FindFile(dir, prefix + "-images-idx3-ubyte");
  RETURN_IF_ERROR(images);
  absl::StatusOr<std::string> labels = FindFile(dir, prefix + "-labels-idx1-ubyte");
  RETURN_IF_ERROR(labels);
  return LoadIdxDataset(*images, *labels);
}

}  // namespace tinyddp::data
