// CUDA data movement: fill, same-device copy, dtype casts (with an optional scale) and the row gather
// that assembles a batch (the cuda:: half of these kernel_list.inc entries; the CPU half is cpu_copy.cc).
// Unlike the math kernels these see every dtype. Conversions follow the CPU's rules exactly, so a cast
// gives the same bits on both: bfloat16 goes through float with round-to-nearest-even, float -> integer
// truncates, integer -> uint8 wraps modulo 256, and a scaled cast forms the product in double and rounds
// once to the output type. The float32 <-> bfloat16 pair of mixed precision, which runs every step, has
// a vectorised kernel of its own.
#include <cstdio>
#include <type_traits>

#include "tensor/internal/cuda_common.cuh"
#include "tensor/internal/kernels.h"

namespace tinyddp::cuda {
namespace {

using internal::Aligned16;
using internal::Bf16;
using internal::kThreads;
using internal::LaunchScope;
using internal::Pack;

// --- Conversions (device mirrors of cpu_copy.cc's Convert and cpu_common.h's ToDouble) -----------------

template <typename To, typename From>
__device__ __forceinline__ To Convert(From v) {
  if constexpr (std::is_same_v<From, Bf16>) {
    return Convert<To>(internal::Bf16ToFloat(v));
  } else if constexpr (std::is_same_v<To, Bf16>) {
    return internal::Bf16FromFloat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, uint8_t> && !std::is_same_v<From, uint8_t>) {
    return static_cast<uint8_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <typename T>
__device__ __forceinline__ double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return static_cast<double>(internal::Bf16ToFloat(v));
  } else {
    return static_cast<double>(v);
  }
}

// --- Kernels -----------------------------------------------------------------------------------------

/// Every element = value, 16 bytes per store where aligned.
template <typename T>
__global__ void FillKernel(T* out, T value, int64_t n, int64_t packs) {
  using P = Pack<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  P fill;
#pragma unroll
  for (int k = 0; k < P::kSize; ++k) fill.v[k] = value;
  for (int64_t p = first; p < packs; p += stride) reinterpret_cast<P*>(out)[p] = fill;
  for (int64_t i = packs * P::kSize + first; i < n; i += stride) out[i] = value;
}

/// out[i] = Convert(x[i]) or, with kScaled, Convert(double(x[i]) * scale).
template <typename From, typename To, bool kScaled>
__global__ void CastKernel(const From* x, To* out, int64_t n, double scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kScaled) {
      out[i] = Convert<To>(ToDouble(x[i]) * scale);
    } else {
      out[i] = Convert<To>(x[i]);
    }
  }
}

/// The float32 <-> bfloat16 casts of mixed precision (a batch going in, gradients coming out), which run
/// every step: four elements per thread per iteration, one 16-byte float access and one 8-byte bfloat16
/// access, when both pointers are 16-byte aligned. Same conversion, same bits as CastKernel.
template <typename E>
struct alignas(4 * sizeof(E)) Four {
  E v[4];
};
template <typename From, typename To>
__global__ void CastFourKernel(const From* x, To* out, int64_t n, int64_t fours) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t q = first; q < fours; q += stride) {
    const Four<From> a = reinterpret_cast<const Four<From>*>(x)[q];
    Four<To> b;
#pragma unroll
    for (int k = 0; k < 4; ++k) b.v[k] = Convert<To>(a.v[k]);
    reinterpret_cast<Four<To>*>(out)[q] = b;
  }
  for (int64_t i = fours * 4 + first; i < n; i += stride) out[i] = Convert<To>(x[i]);
}

/// out row b = x row indices[b], copied in units of U (the widest of 16/8/4/2/1 bytes that divides the
/// row size and both base addresses). An index outside [0, rows) stops the kernel with a message: the
/// host cannot check indices that live on the GPU without waiting for it.
template <typename U>
__global__ void IndexSelectRowsKernel(const U* x, const int64_t* indices, U* out, int64_t rows, int64_t units_per_row,
                                      int64_t total_units) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < total_units; u += stride) {
    const int64_t b = u / units_per_row, j = u - b * units_per_row;
    const int64_t row = indices[b];
    if (row < 0 || row >= rows) {
      if (j == 0) {
        printf(
            "tinyddp: IndexSelectRows: index %lld at position %lld is out of range for %lld rows; "
            "hint: indices must be in [0, N)\n",
            static_cast<long long>(row), static_cast<long long>(b), static_cast<long long>(rows));
      }
      __trap();
    }
    out[u] = x[row * units_per_row + j];
  }
}

// --- Launchers -----------------------------------------------------------------------------------------

template <typename T>
void LaunchFill(const LaunchScope& scope, T* out, T value, int64_t n) {
  if (n == 0) return;
  const int64_t packs = Aligned16(out) ? n / Pack<T>::kSize : 0;
  const int64_t scalars = n - packs * Pack<T>::kSize;
  auto kernel = FillKernel<T>;
  const int grid = internal::GridFor(kernel, packs > scalars ? packs : scalars, scope.device());
  kernel<<<grid, kThreads, 0, scope.stream()>>>(out, value, n, packs);
  CUDA_LAUNCH_CHECK();
}

template <typename U>
void LaunchGather(const LaunchScope& scope, const Tensor& x, const Tensor& indices, Tensor& out, size_t row_bytes) {
  const int64_t units_per_row = static_cast<int64_t>(row_bytes / sizeof(U));
  const int64_t total = units_per_row * indices.numel();
  if (total == 0) return;
  auto kernel = IndexSelectRowsKernel<U>;
  const int grid = internal::GridFor(kernel, total, scope.device());
  kernel<<<grid, kThreads, 0, scope.stream()>>>(static_cast<const U*>(x.data_ptr()), indices.data<int64_t>(),
                                                static_cast<U*>(out.data_ptr()), x.size(0), units_per_row, total);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void Fill(Tensor& out, double value) {
  LaunchScope scope(out);
  const int64_t n = out.numel();
  // The value is converted once on the host, by the same rules as the CPU kernel's FromDouble.
  switch (out.dtype()) {
    case DType::kFloat32:
      return LaunchFill(scope, out.data<float>(), static_cast<float>(value), n);
    case DType::kFloat64:
      return LaunchFill(scope, out.data<double>(), value, n);
    case DType::kBFloat16:
      return LaunchFill(scope, static_cast<Bf16*>(out.data_ptr()), Bf16{BFloat16(static_cast<float>(value)).bits}, n);
    case DType::kInt32:
      return LaunchFill(scope, out.data<int32_t>(), static_cast<int32_t>(value), n);
    case DType::kInt64:
      return LaunchFill(scope, out.data<int64_t>(), static_cast<int64_t>(value), n);
    case DType::kUInt8:
      return LaunchFill(scope, out.data<uint8_t>(), static_cast<uint8_t>(static_cast<int64_t>(value)), n);
  }
}

void Copy(const Tensor& src, Tensor& out) {
  if (src.nbytes() == 0) return;
  LaunchScope scope(out);
  CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToDevice, scope.stream()));
}

void Cast(const Tensor& x, double scale, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchScope scope(out);
  internal::DispatchAll(x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    internal::DispatchAll(out.dtype(), [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* in = static_cast<const From*>(x.data_ptr());
      To* o = static_cast<To*>(out.data_ptr());
      constexpr bool kMixedPrecisionPair = (std::is_same_v<From, float> && std::is_same_v<To, Bf16>) ||
                                           (std::is_same_v<From, Bf16> && std::is_same_v<To, float>);
      if constexpr (kMixedPrecisionPair) {
        if (scale == 1.0 && Aligned16(in) && Aligned16(o)) {
          auto kernel = CastFourKernel<From, To>;
          const int64_t fours = n / 4, rest = n - fours * 4;
          const int grid = internal::GridFor(kernel, fours > rest ? fours : rest, scope.device());
          kernel<<<grid, kThreads, 0, scope.stream()>>>(in, o, n, fours);
          CUDA_LAUNCH_CHECK();
          return;
        }
      }
      if (scale == 1.0) {
        auto kernel = CastKernel<From, To, false>;
        kernel<<<internal::GridFor(kernel, n, scope.device()), kThreads, 0, scope.stream()>>>(in, o, n, scale);
      } else {
        auto kernel = CastKernel<From, To, true>;
        kernel<<<internal::GridFor(kernel, n, scope.device()), kThreads, 0, scope.stream()>>>(in, o, n, scale);
      }
      CUDA_LAUNCH_CHECK();
    });
  });
}

void IndexSelectRows(const Tensor& x, const Tensor& indices, Tensor& out) {
  const int64_t rows = x.size(0);
  const size_t row_bytes = rows == 0 ? 0 : x.nbytes() / static_cast<size_t>(rows);
  if (row_bytes == 0 || indices.numel() == 0) return;
  LaunchScope scope(out);
  const uintptr_t bits = reinterpret_cast<uintptr_t>(x.data_ptr()) | reinterpret_cast<uintptr_t>(out.data_ptr()) |
                         static_cast<uintptr_t>(row_bytes);
  if (bits % 16 == 0) return LaunchGather<uint4>(scope, x, indices, out, row_bytes);
  if (bits % 8 == 0) return LaunchGather<uint2>(scope, x, indices, out, row_bytes);
  if (bits % 4 == 0) return LaunchGather<uint32_t>(scope, x, indices, out, row_bytes);
  if (bits % 2 == 0) return LaunchGather<uint16_t>(scope, x, indices, out, row_bytes);
  LaunchGather<uint8_t>(scope, x, indices, out, row_bytes);
}

}  // namespace tinyddp::cuda
