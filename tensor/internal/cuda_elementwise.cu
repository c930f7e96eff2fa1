// CUDA elementwise kernels: add/sub/mul/div, alpha*a + beta*b, the broadcast bias add, ReLU and GELU
// with their backwards (the cuda:: half of kernel_list.inc; the CPU half is cpu_elementwise.cc).
//
// These kernels only move memory, so they are written for bandwidth: each thread loads 16 bytes per
// operand at a time (four floats, two doubles, eight bfloat16s) when every pointer is 16-byte aligned,
// and a grid-stride loop sized to exactly fill the GPU walks the tensor; the elements past the last full
// pack, or every element of a misaligned view, take a scalar path. Arithmetic spells out each rounding
// (Add/Mul... from cuda_common.cuh) in the same order as the CPU loops, so both give identical bits
// (GELU excepted: tanh differs in its last bits between libm and CUDA). bfloat16 tensors are computed
// in float and each result rounded once (Widen/Narrow), exactly what the CPU's cpu_bf16.cc does.
#include "tensor/internal/cuda_common.cuh"
#include "tensor/internal/kernels.h"

namespace tinyddp::cuda {
namespace {

using internal::Add;
using internal::Aligned16;
using internal::Compute;
using internal::DataAs;
using internal::Div;
using internal::kThreads;
using internal::LaunchScope;
using internal::Mul;
using internal::Narrow;
using internal::Pack;
using internal::Sub;
using internal::Widen;

// --- Kernels -----------------------------------------------------------------------------------------

/// out[i] = f(a[i]) or f(a[i], b[i]), f computing in Compute<S>. Packs [0, packs) are 16-byte vectors;
/// elements from packs * kSize to n go one by one. out may be a itself (in-place updates): each element
/// is read and written by the same thread.
template <typename S, int kInputs, typename F>
__global__ void MapKernel(F f, const S* a, const S* b, S* out, int64_t n, int64_t packs) {
  using P = Pack<S>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    const P x = reinterpret_cast<const P*>(a)[p];
    P y;
    if constexpr (kInputs == 2) y = reinterpret_cast<const P*>(b)[p];
    P r;
#pragma unroll
    for (int k = 0; k < P::kSize; ++k) {
      if constexpr (kInputs == 2) {
        r.v[k] = Narrow<S>(f(Widen(x.v[k]), Widen(y.v[k])));
      } else {
        r.v[k] = Narrow<S>(f(Widen(x.v[k])));
      }
    }
    reinterpret_cast<P*>(out)[p] = r;
  }
  for (int64_t i = packs * P::kSize + first; i < n; i += stride) {
    if constexpr (kInputs == 2) {
      out[i] = Narrow<S>(f(Widen(a[i]), Widen(b[i])));
    } else {
      out[i] = Narrow<S>(f(Widen(a[i])));
    }
  }
}

/// out[i] = x[i] + row[i % cols]; vectorised when cols is a whole number of packs.
template <typename S>
__global__ void AddRowVectorKernel(const S* x, const S* row, S* out, int64_t n, int64_t cols, int64_t packs) {
  using P = Pack<S>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    const int64_t col = (p * P::kSize) % cols;
    const P a = reinterpret_cast<const P*>(x)[p];
    const P r = *reinterpret_cast<const P*>(row + col);
    P o;
#pragma unroll
    for (int k = 0; k < P::kSize; ++k) o.v[k] = Narrow<S>(Add(Widen(a.v[k]), Widen(r.v[k])));
    reinterpret_cast<P*>(out)[p] = o;
  }
  for (int64_t i = packs * P::kSize + first; i < n; i += stride) {
    out[i] = Narrow<S>(Add(Widen(x[i]), Widen(row[i % cols])));
  }
}

// --- The per-element functions -------------------------------------------------------------------------

template <typename T>
struct AddF {
  __device__ T operator()(T x, T y) const { return Add(x, y); }
};
template <typename T>
struct SubF {
  __device__ T operator()(T x, T y) const { return Sub(x, y); }
};
template <typename T>
struct MulF {
  __device__ T operator()(T x, T y) const { return Mul(x, y); }
};
template <typename T>
struct DivF {
  __device__ T operator()(T x, T y) const { return Div(x, y); }
};
template <typename T>
struct ScaleF {  // alpha * x
  T alpha;
  __device__ T operator()(T x) const { return Mul(alpha, x); }
};
template <typename T>
struct AddScaledF {  // x + beta * y: gradient accumulation
  T beta;
  __device__ T operator()(T x, T y) const { return Add(x, Mul(beta, y)); }
};
template <typename T>
struct AxpbyF {  // alpha * x + beta * y
  T alpha, beta;
  __device__ T operator()(T x, T y) const { return Add(Mul(alpha, x), Mul(beta, y)); }
};
template <typename T>
struct ReluF {  // NaN stays NaN, as in torch.relu
  __device__ T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
template <typename T>
struct ReluBackwardF {  // (grad, y): PyTorch's threshold_backward
  __device__ T operator()(T g, T y) const { return y <= T(0) ? T(0) : g; }
};

// GELU, tanh approximation (PyTorch's approximate='tanh'), in the CPU kernel's order of operations.
constexpr double kBeta = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kKappa = 0.044715;
template <typename T>
struct GeluF {
  __device__ T operator()(T v) const {
    const T inner = T(kBeta) * (v + T(kKappa) * v * v * v);
    return T(0.5) * v * (T(1) + tanh(inner));
  }
};
template <typename T>
struct GeluBackwardF {  // (grad, x)
  __device__ T operator()(T g, T v) const {
    const T v2 = v * v;
    const T t = tanh(T(kBeta) * (v + T(kKappa) * v2 * v));
    const T left = T(0.5) * (T(1) + t);
    const T right = T(0.5) * v * (T(1) - t * t) * T(kBeta) * (T(1) + T(3 * kKappa) * v2);
    return g * (left + right);
  }
};

// --- Launchers -----------------------------------------------------------------------------------------

template <int kInputs, typename S, typename F>
void LaunchMap(const LaunchScope& scope, F f, const S* a, const S* b, S* out, int64_t n) {
  if (n == 0) return;
  const bool vector = Aligned16(a) && (kInputs < 2 || Aligned16(b)) && Aligned16(out);
  const int64_t packs = vector ? n / Pack<S>::kSize : 0;
  const int64_t scalars = n - packs * Pack<S>::kSize;
  auto kernel = MapKernel<S, kInputs, F>;
  const int grid = internal::GridFor(kernel, packs > scalars ? packs : scalars, scope.device());
  kernel<<<grid, kThreads, 0, scope.stream()>>>(f, a, b, out, n, packs);
  CUDA_LAUNCH_CHECK();
}

template <template <typename> class F>
void Unary(const char* op, const Tensor& x, Tensor& out) {
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(x.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    LaunchMap<1>(scope, F<Compute<S>>{}, DataAs<const S>(x), static_cast<const S*>(nullptr), DataAs<S>(out),
                 out.numel());
  });
}

template <template <typename> class F>
void Binary(const char* op, const Tensor& a, const Tensor& b, Tensor& out) {
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(a.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    LaunchMap<2>(scope, F<Compute<S>>{}, DataAs<const S>(a), DataAs<const S>(b), DataAs<S>(out), out.numel());
  });
}

}  // namespace

void BinaryOp(BinaryKind op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (op) {
    case BinaryKind::kAdd:
      return Binary<AddF>("Add", a, b, out);
    case BinaryKind::kSub:
      return Binary<SubF>("Sub", a, b, out);
    case BinaryKind::kMul:
      return Binary<MulF>("Mul", a, b, out);
    case BinaryKind::kDiv:
      return Binary<DivF>("Div", a, b, out);
  }
}

void Axpby(double alpha, const Tensor& a, double beta, const Tensor& b, Tensor& out) {
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(a.dtype(), "Axpby", [&](auto tag) {
    using S = decltype(tag);
    using T = Compute<S>;
    // Scalars are rounded to the compute type first, as PyTorch does (and the CPU kernel).
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    const S* x = DataAs<const S>(a);
    S* o = DataAs<S>(out);
    const int64_t n = out.numel();
    if (!b.defined()) {
      LaunchMap<1>(scope, ScaleF<T>{al}, x, static_cast<const S*>(nullptr), o, n);
    } else if (alpha == 1.0) {
      LaunchMap<2>(scope, AddScaledF<T>{be}, x, DataAs<const S>(b), o, n);
    } else {
      LaunchMap<2>(scope, AxpbyF<T>{al, be}, x, DataAs<const S>(b), o, n);
    }
  });
}

void AddRowVector(const Tensor& x, const Tensor& row, Tensor& out) {
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(x.dtype(), "AddRowVector", [&](auto tag) {
    using S = decltype(tag);
    const int64_t n = out.numel(), cols = row.numel();
    if (n == 0 || cols == 0) return;
    const S* in = DataAs<const S>(x);
    const S* r = DataAs<const S>(row);
    S* o = DataAs<S>(out);
    const bool vector = cols % Pack<S>::kSize == 0 && Aligned16(in) && Aligned16(r) && Aligned16(o);
    const int64_t packs = vector ? n / Pack<S>::kSize : 0;
    const int64_t scalars = n - packs * Pack<S>::kSize;
    auto kernel = AddRowVectorKernel<S>;
    const int grid = internal::GridFor(kernel, packs > scalars ? packs : scalars, scope.device());
    kernel<<<grid, kThreads, 0, scope.stream()>>>(in, r, o, n, cols, packs);
    CUDA_LAUNCH_CHECK();
  });
}

void Relu(const Tensor& x, Tensor& out) { Unary<ReluF>("Relu", x, out); }
void ReluBackward(const Tensor& grad, const Tensor& y, Tensor& out) {
  Binary<ReluBackwardF>("ReluBackward", grad, y, out);
}
void Gelu(const Tensor& x, Tensor& out) { Unary<GeluF>("Gelu", x, out); }
void GeluBackward(const Tensor& grad, const Tensor& x, Tensor& out) {
  Binary<GeluBackwardF>("GeluBackward", grad, x, out);
}

}  // namespace tinyddp::cuda
