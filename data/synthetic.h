// A deterministic, learnable synthetic classification dataset: Gaussian inputs labelled by a fixed
// random "teacher" MLP. For tests and `--dataset=synthetic`, where the real data is absent or a run must
// be fast and exactly reproducible.
//
// Sits beside fashion_mnist.h: both produce a TensorDataset (dataset.h) of float32 [N, D] inputs and
// int64 labels. Everything is a function of `seed`:
//   teacher:  W1 [H, D] ~ N(0, 1/D),  W2 [C, H] ~ N(0, 1/H),  b2 centres the logits (below)
//   inputs:   x ~ N(0, 1), drawn from a counter range that differs between "train" and "test"
//   labels:   argmax_c (W2 relu(W1 x) + b2)_c
// Both splits share the teacher, so what a model learns on "train" transfers to "test". The numbers come
// from tensor/'s counter-based Philox generator, so every rank and every run builds the same bits.
#ifndef TINYDDP_DATA_SYNTHETIC_H_
#define TINYDDP_DATA_SYNTHETIC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace tinyddp::data {

struct SyntheticOptions {
  int64_t num_examples = 10000;
  int64_t input_size = 784;
  int64_t num_classes = 10;
  int64_t teacher_hidden = 64;
  uint64_t seed = 0;
};

/// The "train" or "test" split of the synthetic dataset described above. InvalidArgument for a
/// non-positive size, fewer than 2 classes, or another split name.
absl::StatusOr<TensorDataset> MakeSyntheticDataset(const SyntheticOptions& options, absl::string_view split);

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_SYNTHETIC_H_
