// CPU data movement: fill, same-device copy, dtype casts (with an optional scale) and the row gather
// that assembles a batch. These are the kernels that see every dtype, not only float32/float64.
#include <cstring>
#include <type_traits>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {
namespace {

// One element from type From to type To, as PyTorch's .to(dtype) does it: bfloat16 goes through float
// (rounding to nearest even on the way in), float -> integer truncates toward zero, and integer ->
// uint8 wraps modulo 256.
template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_same_v<From, BFloat16>) {
    return Convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, uint8_t> && !std::is_same_v<From, uint8_t>) {
    return static_cast<uint8_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace

void Fill(Tensor& out, double value) {
  DispatchAll(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = FromDouble<T>(value);
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  });
}

void Copy(const Tensor& src, Tensor& out) { std::memcpy(out.data_ptr(), src.data_ptr(), src.nbytes()); }

void Cast(const Tensor& x, double scale, Tensor& out) {
  const int64_t n = x.numel();
  DispatchAll(x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    DispatchAll(out.dtype(), [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* in = x.data<From>();
      To* o = out.data<To>();
      if (scale == 1.0) {
        for (int64_t i = 0; i < n; ++i) o[i] = Convert<To>(in[i]);
      } else {
        // Scaled: the product is formed in double and rounded once to the output type, so
        // uint8 pixel * (1/255) lands on the float nearest the exact quotient.
        for (int64_t i = 0; i < n; ++i) o[i] = Convert<To>(ToDouble(in[i]) * scale);
      }
    });
  });
}

void IndexSelectRows(const Tensor& x, const Tensor& indices, Tensor& out) {
  const int64_t rows = x.size(0);
  const size_t row_bytes = rows == 0 ? 0 : x.nbytes() / static_cast<size_t>(rows);
  const int64_t* idx = indices.data<int64_t>();
  const auto* src = static_cast<const unsigned char*>(x.data_ptr());
  auto* dst = static_cast<unsigned char*>(out.data_ptr());
  for (int64_t b = 0; b < indices.numel(); ++b) {
    TINYDDP_CHECK_OP(idx[b] >= 0 && idx[b] < rows, "IndexSelectRows", "index ", idx[b], " at position ", b,
                     " is out of range for ", rows, " rows of ", ShapeToString(x.shape()),
                     "; hint: indices must be in [0, N)");
    std::memcpy(dst + b * row_bytes, src + idx[b] * row_bytes, row_bytes);
  }
}

}  // namespace tinyddp::cpu
