// Dataset's default batch gather and the in-memory TensorDataset.
#include "data/dataset.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tinyddp::data {
namespace internal {

absl::Status CheckBatchBuffers(int64_t batch, int64_t input_size, const Tensor& inputs, const Tensor& labels) {
  if (!inputs.defined() || !labels.defined()) {
    return absl::InvalidArgumentError("GetBatchInto: the input and label buffers must be defined tensors");
  }
  if (!inputs.device().is_cpu() || !labels.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("GetBatchInto: buffers must be host tensors, got ",
                                                   inputs.device().ToString(), " and ",
                                                   labels.device().ToString()));
  }
  if (inputs.dtype() != DType::kFloat32 || inputs.dim() != 2 || inputs.size(1) != input_size ||
      inputs.size(0) < batch) {
    return absl::InvalidArgumentError(absl::StrCat("GetBatchInto: inputs buffer is ", DTypeName(inputs.dtype()),
                                                   " ", ShapeToString(inputs.shape()), ", need float32 [>=", batch,
                                                   ", ", input_size, "]"));
  }
  if (labels.dtype() != DType::kInt64 || labels.dim() != 1 || labels.size(0) < batch) {
    return absl::InvalidArgumentError(absl::StrCat("GetBatchInto: labels buffer is ", DTypeName(labels.dtype()),
                                                   " ", ShapeToString(labels.shape()), ", need int64 [>=", batch,
                                                   "]"));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status Dataset::GetBatchInto(absl::Span<const int64_t> indices, Tensor& inputs, Tensor& labels) const {
  const int64_t d = input_size();
  RETURN_IF_ERROR(internal::CheckBatchBuffers(indices.size(), d, inputs, labels));
  float* x = inputs.data<float>();
  int64_t* y = labels.data<int64_t>();
  for (size_t b = 0; b < indices.size(); ++b) {
    absl::StatusOr<Example> e = Get(indices[b]);
    RETURN_IF_ERROR(e);
    if (e->input.dtype() != DType::kFloat32 || e->input.numel() != d || !e->input.device().is_cpu()) {
      return absl::InternalError(absl::StrCat("Dataset::Get(", indices[b], ") returned a ",
                                              DTypeName(e->input.dtype()), " ", ShapeToString(e->input.shape()),
                                              " input on ", e->input.device().ToString(),
                                              "; expected float32 [", d, "] on cpu"));
    }
    std::memcpy(x + b * d, e->input.data_ptr(), d * sizeof(float));
    y[b] = e->label;
  }
  return absl::OkStatus();
}

absl::StatusOr<Batch> Dataset::GetBatch(absl::Span<const int64_t> indices) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  Batch batch{Tensor::Empty({n, input_size()}, DType::kFloat32), Tensor::Empty({n}, DType::kInt64)};
  RETURN_IF_ERROR(GetBatchInto(indices, batch.inputs, batch.labels));
  return batch;
}

absl::StatusOr<TensorDataset> TensorDataset::Create(Tensor inputs, Tensor labels, int64_t num_classes) {
  if (!inputs.defined() || !labels.defined()) {
    return absl::InvalidArgumentError("TensorDataset: inputs and labels must be defined tensors");
  }
  if (inputs.dtype() != DType::kFloat32 || inputs.dim() != 2 || !inputs.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("TensorDataset: inputs must be float32 [N, D] on the cpu, got ",
                                                   DTypeName(inputs.dtype()), " ", ShapeToString(inputs.shape()),
                                                   " on ", inputs.device().ToString()));
  }
  if (labels.dtype() != DType::kInt64 || labels.dim() != 1 || !labels.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("TensorDataset: labels must be int64 [N] on the cpu, got ",
                                                   DTypeName(labels.dtype()), " ", ShapeToString(labels.shape()),
                                                   " on ", labels.device().ToString()));
  }
  if (inputs.size(0) != labels.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat("TensorDataset: ", inputs.size(0), " inputs but ",
                                                   labels.size(0), " labels"));
  }
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("TensorDataset: num_classes must be positive, got ", num_classes));
  }
  const int64_t* y = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.size(0); ++i) {
    if (y[i] < 0 || y[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("TensorDataset: label ", y[i], " of example ", i,
                                                     " is outside [0, ", num_classes, ")"));
    }
  }
  return TensorDataset(std::move(inputs), std::move(labels), num_classes);
}

absl::StatusOr<Example> TensorDataset::Get(int64_t index) const {
  if (index < 0 || index >= Size()) {
    return absl::OutOfRangeError(absl::StrCat("TensorDataset::Get: index ", index, " outside [0, ", Size(), ")"));
  }
  // A view of row `index`: no copy.
  return Example{inputs_.Rows(index, index + 1).View({input_size()}), labels_.data<int64_t>()[index]};
}

// One memcpy per row straight from the big tensor into the (pinned) batch buffer. A batch of 64 rows of
// 784 floats is 200 KB, so this is memory-bandwidth bound and far below a training step's cost.
absl::Status TensorDataset::GetBatchInto(absl::Span<const int64_t> indices, Tensor& inputs,
                                         Tensor& labels) const {
  const int64_t d = input_size();
  RETURN_IF_ERROR(internal::CheckBatchBuffers(indices.size(), d, inputs, labels));
  const float* src_x = inputs_.data<float>();
  const int64_t* src_y = labels_.data<int64_t>();
  float* x = inputs.data<float>();
  int64_t* y = labels.data<int64_t>();
  const int64_t n = Size();
  for (size_t b = 0; b < indices.size(); ++b) {
    const int64_t i = indices[b];
    if (i < 0 || i >= n) {
      return absl::OutOfRangeError(absl::StrCat("TensorDataset::GetBatchInto: index ", i, " at position ", b,
                                                " outside [0, ", n, ")"));
    }
    std::memcpy(x + b * d, src_x + i * d, d * sizeof(float));
    y[b] = src_y[i];
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::data
