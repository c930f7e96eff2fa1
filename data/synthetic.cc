// The synthetic dataset: Philox-drawn inputs and a random ReLU teacher whose argmax gives the labels.
#include "data/synthetic.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensor/ops.h"

namespace tinyddp::data {
namespace {

// Disjoint Philox counter ranges (element i of a tensor uses counter offset + i), so the teacher and
// the two splits never share random numbers. 2^40 elements per range is far beyond any dataset here.
constexpr uint64_t kTeacherW1Offset = 0;
constexpr uint64_t kTeacherW2Offset = uint64_t{1} << 39;
constexpr uint64_t kTrainOffset = uint64_t{1} << 40;
constexpr uint64_t kTestOffset = uint64_t{2} << 40;

}  // namespace

absl::StatusOr<TensorDataset> MakeSyntheticDataset(const SyntheticOptions& options, absl::string_view split) {
  if (split != "train" && split != "test") {
    return absl::InvalidArgumentError(absl::StrCat("synthetic dataset: unknown split \"", split,
                                                   "\"; use \"train\" or \"test\""));
  }
  const int64_t n = options.num_examples, d = options.input_size, h = options.teacher_hidden,
                c = options.num_classes;
  if (n <= 0 || d <= 0 || h <= 0 || c < 2) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic dataset: need num_examples, input_size and "
                                                   "teacher_hidden > 0 and num_classes >= 2, got ",
                                                   n, ", ", d, ", ", h, ", ", c));
  }
  if (n * d >= static_cast<int64_t>(kTrainOffset)) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic dataset: ", n, " x ", d, " inputs is too large"));
  }

  Tensor w1 = Tensor::Empty({h, d});
  Tensor w2 = Tensor::Empty({c, h});
  ops::NormalInit(w1, 0.0, 1.0 / std::sqrt(static_cast<double>(d)), options.seed, kTeacherW1Offset);
  ops::NormalInit(w2, 0.0, 1.0 / std::sqrt(static_cast<double>(h)), options.seed, kTeacherW2Offset);

  // Without a bias, some classes would be rare: relu(z) has a positive mean, so each logit has an offset
  // sum_j W2[c, j] E[relu(z_j)] that favours a few classes. For x ~ N(0, I), z_j = W1[j] . x is
  // N(0, |W1[j]|^2) and E[relu(z_j)] = |W1[j]| / sqrt(2 pi). Subtracting the offset analytically (rather
  // than from the data) keeps the teacher the same for both splits.
  std::vector<float> b2(c, 0.0f);
  {
    const float* w1p = w1.data<float>();
    const float* w2p = w2.data<float>();
    for (int64_t j = 0; j < h; ++j) {
      double norm2 = 0;
      for (int64_t k = 0; k < d; ++k) norm2 += double{w1p[j * d + k]} * w1p[j * d + k];
      const double mean_relu = std::sqrt(norm2) / std::sqrt(2.0 * M_PI);
      for (int64_t k = 0; k < c; ++k) b2[k] -= static_cast<float>(w2p[k * h + j] * mean_relu);
    }
  }

  Tensor x = Tensor::Empty({n, d});
  ops::NormalInit(x, 0.0, 1.0, options.seed, split == "train" ? kTrainOffset : kTestOffset);
  Tensor logits = ops::Linear(ops::Relu(ops::Linear(x, w1, Tensor())), w2, Tensor::FromVector(b2, {c}));
  return TensorDataset::Create(std::move(x), ops::ArgMax(logits), c);
}

}  // namespace tinyddp::data
