// Tensor: an n-dimensional, row-major, contiguous array of one DType on one Device.
//
// The first file to read. A Tensor is a cheap handle (shared ownership of a TensorImpl); copying a
// Tensor copies the handle, not the data (use Clone() for that). Data lives in a Storage that views
// share: Reshape/View and Rows return tensors over the same bytes at an offset. Every tensor is
// contiguous; matmul takes transpose flags instead of strided views, which is all an MLP needs.
// Math lives in tensor/ops.h; gradients live one layer up, in autograd/.
#ifndef TINYDDP_TENSOR_TENSOR_H_
#define TINYDDP_TENSOR_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace tinyddp {

/// Sizes along each dimension, outermost first. Inline storage: building a shape does not touch the heap.
using Shape = absl::InlinedVector<int64_t, 4>;

/// "[64, 784]".
std::string ShapeToString(absl::Span<const int64_t> shape);
/// Product of the sizes (1 for a scalar shape []).
int64_t NumElements(absl::Span<const int64_t> shape);

class Tensor {
 public:
  /// An undefined tensor (defined() is false), like a default torch.Tensor() slot for .grad.
  Tensor() = default;

  // --- Creation --------------------------------------------------------------------------------
  /// Uninitialised contents.
  static Tensor Empty(Shape shape, DType dtype = DType::kFloat32, Device device = Device::CPU());
  static Tensor Zeros(Shape shape, DType dtype = DType::kFloat32, Device device = Device::CPU());
  static Tensor Full(Shape shape, double value, DType dtype = DType::kFloat32, Device device = Device::CPU());
  /// Copies `values` (numel of `shape` of them) into a new tensor on `device`.
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, Shape shape, Device device = Device::CPU());
  /// Wraps an existing Storage (no copy). Precondition: offset + numel*size fits in the storage.
  static Tensor FromStorage(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype);

  // --- Metadata ----------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  /// Size along `d`; negative d counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype()); }
  std::string ToString() const;  // "Tensor[64, 784] float32 cuda:0" plus values when small

  // --- Data --------------------------------------------------------------------------------------
  /// Address of the first element (storage base + offset); device memory for CUDA tensors.
  void* data_ptr() const;
  /// Typed address. Stops with a message if T does not match dtype().
  template <typename T>
  T* data() const;
  const std::shared_ptr<Storage>& storage() const;
  size_t byte_offset() const;
  /// True when both tensors view the same Storage (e.g. a .grad that is a view into a DDP bucket).
  bool SharesStorageWith(const Tensor& other) const;
  /// Copies the elements to a host vector (synchronises with the current stream for CUDA tensors).
  template <typename T>
  std::vector<T> ToVector() const;
  /// The single element of a one-element tensor, converted to double (synchronises for CUDA).
  double Item() const;

  // --- Views (share storage) ---------------------------------------------------------------------
  /// Same elements, new shape; one size may be -1 (inferred). Stops if the element counts differ.
  Tensor View(Shape shape) const;
  Tensor Reshape(Shape shape) const { return View(std::move(shape)); }
  /// Rows [begin, end) along dim 0: for a 1-D tensor, a contiguous slice of elements.
  Tensor Rows(int64_t begin, int64_t end) const;
  /// View as 1-D.
  Tensor Flatten() const;

  // --- Copies ------------------------------------------------------------------------------------
  /// A new tensor with its own storage and the same contents.
  Tensor Clone() const;
  /// A copy on `device` (returns *this when already there). Host->device copies from pinned
  /// memory are asynchronous on the current stream.
  Tensor To(Device device) const;

 private:
  struct Impl {
    std::shared_ptr<Storage> storage;
    size_t byte_offset = 0;
    Shape shape;
    DType dtype = DType::kFloat32;
  };
  explicit Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  void CheckDType(DType expected, const char* what) const;
  std::shared_ptr<Impl> impl_;
};

// --- Template definitions ------------------------------------------------------------------------

template <typename T>
T* Tensor::data() const {
  CheckDType(DTypeOf<T>(), "data<T>()");
  return static_cast<T*>(data_ptr());
}

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_TENSOR_H_
