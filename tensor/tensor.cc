// Tensor: creation, metadata, views and copies (tensor/tensor.h). No math here: that is ops.cc.
// Every operation on a CUDA tensor in this file is a byte copy (CopyBytes in storage.cc), which keeps
// tensor_core free of kernels; Zeros/Full on a GPU copy a host pattern (see FillBytes).
#include "tensor/tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"

namespace tinyddp {
namespace {

double LoadAsDouble(const void* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return *static_cast<const float*>(p);
    case DType::kFloat64: return *static_cast<const double*>(p);
    case DType::kBFloat16: return static_cast<float>(*static_cast<const BFloat16*>(p));
    case DType::kInt32: return *static_cast<const int32_t*>(p);
    case DType::kInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::kUInt8: return *static_cast<const uint8_t*>(p);
  }
  return 0;
}

void StoreFromDouble(void* p, DType dtype, double v) {
  switch (dtype) {
    case DType::kFloat32: *static_cast<float*>(p) = static_cast<float>(v); return;
    case DType::kFloat64: *static_cast<double*>(p) = v; return;
    case DType::kBFloat16: *static_cast<BFloat16*>(p) = BFloat16(static_cast<float>(v)); return;
    case DType::kInt32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v); return;
    case DType::kInt64: *static_cast<int64_t*>(p) = static_cast<int64_t>(v); return;
    // Through int64 so that e.g. -1 wraps to 255 as in PyTorch instead of being undefined behaviour.
    case DType::kUInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(static_cast<int64_t>(v)); return;
  }
}

// Writes `value` into every element of t. On the host: a plain loop. On a GPU: a host buffer of at most
// 1 MiB holding the pattern is copied repeatedly (a pageable host->device copy returns once the buffer
// has been staged, so reusing it is safe). Creation-time only; the hot path uses ops::Fill.
void FillBytes(const Tensor& t, double value) {
  const size_t esize = DTypeSize(t.dtype());
  const int64_t n = t.numel();
  if (n == 0) return;
  unsigned char one[8];
  StoreFromDouble(one, t.dtype(), value);
  if (t.device().is_cpu()) {
    auto* dst = static_cast<unsigned char*>(t.data_ptr());
    bool all_zero = std::all_of(one, one + esize, [](unsigned char c) { return c == 0; });
    if (all_zero) {
      std::memset(dst, 0, n * esize);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * esize, one, esize);
    }
    return;
  }
  const int64_t chunk_elems = std::min<int64_t>(n, (1 << 20) / static_cast<int64_t>(esize));
  std::vector<unsigned char> pattern(chunk_elems * esize);
  for (int64_t i = 0; i < chunk_elems; ++i) std::memcpy(pattern.data() + i * esize, one, esize);
  auto* dst = static_cast<unsigned char*>(t.data_ptr());
  for (int64_t done = 0; done < n; done += chunk_elems) {
    const int64_t count = std::min(chunk_elems, n - done);
    CopyBytes(dst + done * esize, t.device(), pattern.data(), Device::CPU(), count * esize);
  }
}

}  // namespace

std::string ShapeToString(absl::Span<const int64_t> shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// --- Creation ------------------------------------------------------------------------------------

Tensor Tensor::Empty(Shape shape, DType dtype, Device device) {
  for (int64_t s : shape) {
    TINYDDP_CHECK_OP(s >= 0, "Tensor::Empty", "negative size in shape ", ShapeToString(shape));
  }
  const size_t nbytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  auto impl = std::make_shared<Impl>();
  impl->storage = AllocateStorage(nbytes, device);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::Zeros(Shape shape, DType dtype, Device device) { return Full(std::move(shape), 0.0, dtype, device); }

Tensor Tensor::Full(Shape shape, double value, DType dtype, Device device) {
  Tensor t = Empty(std::move(shape), dtype, device);
  FillBytes(t, value);
  return t;
}

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, Shape shape, Device device) {
  TINYDDP_CHECK_OP(static_cast<int64_t>(values.size()) == NumElements(shape), "Tensor::FromVector", values.size(),
                   " values do not fill shape ", ShapeToString(shape), " (", NumElements(shape),
                   " elements); hint: pass a shape whose sizes multiply to values.size()");
  Tensor t = Empty(std::move(shape), DTypeOf<T>(), device);
  CopyBytes(t.data_ptr(), device, values.data(), Device::CPU(), t.nbytes());
  return t;
}

Tensor Tensor::FromStorage(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype) {
  TINYDDP_CHECK_OP(storage != nullptr, "Tensor::FromStorage", "null storage");
  const size_t nbytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  TINYDDP_CHECK_OP(byte_offset + nbytes <= storage->nbytes(), "Tensor::FromStorage", "a ", DTypeName(dtype), " ",
                   ShapeToString(shape), " tensor at byte offset ", byte_offset, " needs ", byte_offset + nbytes,
                   " bytes but the storage has ", storage->nbytes());
  TINYDDP_CHECK_OP(byte_offset % DTypeSize(dtype) == 0, "Tensor::FromStorage", "byte offset ", byte_offset,
                   " is not a multiple of the ", DTypeName(dtype), " element size");
  auto impl = std::make_shared<Impl>();
  impl->storage = std::move(storage);
  impl->byte_offset = byte_offset;
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// --- Metadata ------------------------------------------------------------------------------------

#define TINYDDP_CHECK_DEFINED(what) \
  TINYDDP_CHECK_OP(impl_ != nullptr, what, "the tensor is undefined (default-constructed); hint: create it first")

const Shape& Tensor::shape() const {
  TINYDDP_CHECK_DEFINED("Tensor::shape");
  return impl_->shape;
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  TINYDDP_CHECK_OP(d >= -n && d < n, "Tensor::size", "dim ", d, " out of range for shape ", ShapeToString(shape()));
  return impl_->shape[d < 0 ? d + n : d];
}

int64_t Tensor::numel() const { return NumElements(shape()); }

DType Tensor::dtype() const {
  TINYDDP_CHECK_DEFINED("Tensor::dtype");
  return impl_->dtype;
}

Device Tensor::device() const {
  TINYDDP_CHECK_DEFINED("Tensor::device");
  return impl_->storage->device();
}

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = absl::StrCat("Tensor", ShapeToString(shape()), " ", DTypeName(dtype()), " ", device().ToString());
  constexpr int64_t kMaxShown = 16;
  if (numel() > kMaxShown) return s;
  std::vector<unsigned char> host(nbytes());
  CopyBytes(host.data(), Device::CPU(), data_ptr(), device(), nbytes());
  std::vector<std::string> values;
  for (int64_t i = 0; i < numel(); ++i) {
    values.push_back(absl::StrCat(LoadAsDouble(host.data() + i * DTypeSize(dtype()), dtype())));
  }
  return absl::StrCat(s, " {", absl::StrJoin(values, ", "), "}");
}

// --- Data ----------------------------------------------------------------------------------------

void* Tensor::data_ptr() const {
  TINYDDP_CHECK_DEFINED("Tensor::data_ptr");
  return static_cast<char*>(impl_->storage->data()) + impl_->byte_offset;
}

const std::shared_ptr<Storage>& Tensor::storage() const {
  TINYDDP_CHECK_DEFINED("Tensor::storage");
  return impl_->storage;
}

size_t Tensor::byte_offset() const {
  TINYDDP_CHECK_DEFINED("Tensor::byte_offset");
  return impl_->byte_offset;
}

bool Tensor::SharesStorageWith(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void Tensor::CheckDType(DType expected, const char* what) const {
  TINYDDP_CHECK_OP(dtype() == expected, what, "the tensor is ", DTypeName(dtype()), " ", ShapeToString(shape()),
                   " but ", DTypeName(expected), " was asked for; hint: use the element type of dtype(), or "
                   "ops::Cast first");
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  CheckDType(DTypeOf<T>(), "Tensor::ToVector<T>");
  std::vector<T> out(numel());
  CopyBytes(out.data(), Device::CPU(), data_ptr(), device(), nbytes());
  return out;
}

double Tensor::Item() const {
  TINYDDP_CHECK_OP(numel() == 1, "Tensor::Item", "needs exactly one element, the tensor is ",
                   ShapeToString(shape()), "; hint: reduce it first (ops::Sum / ops::Mean)");
  unsigned char host[8];
  CopyBytes(host, Device::CPU(), data_ptr(), device(), DTypeSize(dtype()));
  return LoadAsDouble(host, dtype());
}

// --- Views ---------------------------------------------------------------------------------------

Tensor Tensor::View(Shape new_shape) const {
  const int64_t n = numel();
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      TINYDDP_CHECK_OP(infer_at < 0, "Tensor::View", "only one size may be -1, got ", ShapeToString(new_shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      TINYDDP_CHECK_OP(new_shape[i] >= 0, "Tensor::View", "negative size in ", ShapeToString(new_shape));
      known *= new_shape[i];
    }
  }
  if (infer_at >= 0) {
    TINYDDP_CHECK_OP(known != 0 && n % known == 0, "Tensor::View", "cannot infer -1 in ", ShapeToString(new_shape),
                     " for ", n, " elements of ", ShapeToString(shape()));
    new_shape[infer_at] = n / known;
    known = n;
  }
  TINYDDP_CHECK_OP(known == n, "Tensor::View", "shape ", ShapeToString(new_shape), " has ", known,
                   " elements but the tensor ", ShapeToString(shape()), " has ", n,
                   "; hint: the element count must not change");
  auto impl = std::make_shared<Impl>(*impl_);
  impl->shape = std::move(new_shape);
  return Tensor(std::move(impl));
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  TINYDDP_CHECK_OP(dim() >= 1, "Tensor::Rows", "needs at least 1 dim, the tensor is a scalar");
  const int64_t rows = shape()[0];
  TINYDDP_CHECK_OP(0 <= begin && begin <= end && end <= rows, "Tensor::Rows", "range [", begin, ", ", end,
                   ") is not inside the ", rows, " rows of ", ShapeToString(shape()));
  const int64_t row_elems = rows == 0 ? 0 : numel() / rows;
  auto impl = std::make_shared<Impl>(*impl_);
  impl->byte_offset += static_cast<size_t>(begin * row_elems) * DTypeSize(dtype());
  impl->shape[0] = end - begin;
  return Tensor(std::move(impl));
}

Tensor Tensor::Flatten() const { return View({numel()}); }

// --- Copies --------------------------------------------------------------------------------------

Tensor Tensor::Clone() const {
  Tensor t = Empty(shape(), dtype(), device());
  CopyBytes(t.data_ptr(), device(), data_ptr(), device(), nbytes());
  return t;
}

Tensor Tensor::To(Device target) const {
  if (target == device()) return *this;
  Tensor t = Empty(shape(), dtype(), target);
  CopyBytes(t.data_ptr(), target, data_ptr(), device(), nbytes());
  return t;
}

// FromVector / ToVector for the six element types.
#define TINYDDP_INSTANTIATE(T)                                                                \
  template Tensor Tensor::FromVector<T>(const std::vector<T>& values, Shape shape, Device device); \
  template std::vector<T> Tensor::ToVector<T>() const;
TINYDDP_INSTANTIATE(float)
TINYDDP_INSTANTIATE(double)
TINYDDP_INSTANTIATE(BFloat16)
TINYDDP_INSTANTIATE(int32_t)
TINYDDP_INSTANTIATE(int64_t)
TINYDDP_INSTANTIATE(uint8_t)
#undef TINYDDP_INSTANTIATE

}  // namespace tinyddp
