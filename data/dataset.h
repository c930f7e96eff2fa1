// Dataset: what a training loop draws examples from, and TensorDataset, the in-memory one.
//
// Sits between the sources of data (the IDX reader in fashion_mnist.h, the synthetic generator in
// synthetic.h) and the DataLoader (data_loader.h), which asks for whole batches by index. Every example
// is a flat float32 input vector of input_size() values and an int64 class label, which is what a
// classifier MLP consumes. Access returns absl::Status because a dataset may sit on a disk or a network;
// the in-memory one only fails on an index out of range.
#ifndef TINYDDP_DATA_DATASET_H_
#define TINYDDP_DATA_DATASET_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace tinyddp::data {

/// One example: input is float32 [input_size()], label is in [0, num_classes()).
struct Example {
  Tensor input;
  int64_t label = 0;
};

/// A batch: inputs float32 [B, input_size()], labels int64 [B], both on the same device.
struct Batch {
  Tensor inputs;
  Tensor labels;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

/// A map-style dataset (PyTorch's torch.utils.data.Dataset with __len__ and __getitem__).
/// Thread-safety: all methods are const and must be safe to call from several threads at once
/// (the DataLoader gathers on its own thread while the trainer may read examples).
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of examples.
  virtual int64_t Size() const = 0;
  /// Length of every input vector (784 for 28x28 images).
  virtual int64_t input_size() const = 0;
  /// Labels lie in [0, num_classes()).
  virtual int64_t num_classes() const = 0;

  /// Example `index`; OutOfRange unless 0 <= index < Size().
  virtual absl::StatusOr<Example> Get(int64_t index) const = 0;

  /// Gathers the examples at `indices` into the first indices.size() rows of existing host tensors:
  /// `inputs` float32 [>= B, input_size()] and `labels` int64 [>= B] on the CPU (pinned or not).
  /// This is the DataLoader's hot path: it writes into reused buffers and allocates nothing.
  /// The default calls Get once per index; in-memory datasets override it with a row copy loop.
  virtual absl::Status GetBatchInto(absl::Span<const int64_t> indices, Tensor& inputs, Tensor& labels) const;

  /// The examples at `indices` as a new CPU batch (a convenience over GetBatchInto).
  absl::StatusOr<Batch> GetBatch(absl::Span<const int64_t> indices) const;
};

/// A dataset held in memory as two CPU tensors: inputs float32 [N, D] and labels int64 [N].
/// Copying a TensorDataset copies two tensor handles, not the data. Immutable, hence thread-safe.
class TensorDataset : public Dataset {
 public:
  /// Checks shapes, dtypes, devices and that every label is in [0, num_classes); InvalidArgument if not.
  static absl::StatusOr<TensorDataset> Create(Tensor inputs, Tensor labels, int64_t num_classes);

  int64_t Size() const override { return labels_.size(0); }
  int64_t input_size() const override { return inputs_.size(1); }
  int64_t num_classes() const override { return num_classes_; }
  absl::StatusOr<Example> Get(int64_t index) const override;
  absl::Status GetBatchInto(absl::Span<const int64_t> indices, Tensor& inputs, Tensor& labels) const override;

  /// The whole dataset, float32 [N, D] and int64 [N] (views, not copies).
  const Tensor& inputs() const { return inputs_; }
  const Tensor& labels() const { return labels_; }

 private:
  TensorDataset(Tensor inputs, Tensor labels, int64_t num_classes)
      : inputs_(std::move(inputs)), labels_(std::move(labels)), num_classes_(num_classes) {}
  Tensor inputs_;
  Tensor labels_;
  int64_t num_classes_;
};

namespace internal {
/// Checks the buffers handed to GetBatchInto (CPU, dtypes, shapes, room for `batch` rows of `input_size`).
absl::Status CheckBatchBuffers(int64_t batch, int64_t input_size, const Tensor& inputs, const Tensor& labels);
}  // namespace internal

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_DATASET_H_
