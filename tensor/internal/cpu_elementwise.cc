// CPU elementwise kernels: add/sub/mul/div, alpha*a + beta*b, the broadcast bias add, ReLU and GELU with
// their backwards. Each is a plain loop over contiguous memory that the compiler vectorises; the
// (rare) aliasing of out with an input is handled by its runtime overlap check.
#include <cmath>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void BinaryOp(BinaryKind op, const Tensor& a, const Tensor& b, Tensor& out) {
  DispatchFloat(a.dtype(), "BinaryOp", [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
    switch (op) {
      case BinaryKind::kAdd: for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i]; break;
      case BinaryKind::kSub: for (int64_t i = 0; i < n; ++i) o[i] = x[i] - y[i]; break;
      case BinaryKind::kMul: for (int64_t i = 0; i < n; ++i) o[i] = x[i] * y[i]; break;
      case BinaryKind::kDiv: for (int64_t i = 0; i < n; ++i) o[i] = x[i] / y[i]; break;
    }
  });
}

void Axpby(double alpha, const Tensor& a, double beta, const Tensor& b, Tensor& out) {
  DispatchFloat(a.dtype(), "Axpby", [&](auto tag) {
    using T = decltype(tag);
    // Scalars are rounded to the tensor's type first, as PyTorch does for add(alpha=...) and mul.
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    const T* x = a.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
    if (!b.defined()) {
      for (int64_t i = 0; i < n; ++i) o[i] = al * x[i];
    } else if (alpha == 1.0) {  // AddInto: dst += beta * src, the gradient-accumulation case
      const T* y = b.data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] + be * y[i];
    } else {
      const T* y = b.data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = al * x[i] + be * y[i];
    }
  });
}

void AddRowVector(const Tensor& x, const Tensor& row, Tensor& out) {
  DispatchFloat(x.dtype(), "AddRowVector", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.size(0), cols = x.size(1);
    const T* in = x.data<T>();
    const T* r = row.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) o[i * cols + j] = in[i * cols + j] + r[j];
    }
  });
}

void Relu(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "Relu", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
    // `v < 0 ? 0 : v` rather than max(v, 0): NaN stays NaN, as in torch.relu.
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] < T(0) ? T(0) : in[i];
  });
}

void ReluBackward(const Tensor& grad, const Tensor& y, Tensor& out) {
  DispatchFloat(grad.dtype(), "ReluBackward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    const T* v = y.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = v[i] <= T(0) ? T(0) : g[i];  // PyTorch's threshold_backward
  });
}

namespace {
// GELU, tanh approximation (PyTorch's approximate='tanh'): kBeta = sqrt(2/pi), kKappa = 0.044715.
constexpr double kBeta = 0.7978845608028654;
constexpr double kKappa = 0.044715;
}  // namespace

void Gelu(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "Gelu", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      const T v = in[i];
      const T inner = T(kBeta) * (v + T(kKappa) * v * v * v);
      o[i] = T(0.5) * v * (T(1) + std::tanh(inner));
    }
  });
}

void GeluBackward(const Tensor& grad, const Tensor& x, Tensor& out) {
  DispatchFloat(grad.dtype(), "GeluBackward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      // d/dx [0.5 x (1 + tanh(u))] with u = kBeta (x + kKappa x^3):
      //   0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) kBeta (1 + 3 kKappa x^2)
      const T v = in[i];
      const T v2 = v * v;
      const T t = std::tanh(T(kBeta) * (v + T(kKappa) * v2 * v));
      const T left = T(0.5) * (T(1) + t);
      const T right = T(0.5) * v * (T(1) - t * t) * T(kBeta) * (T(1) + T(3 * kKappa) * v2);
      o[i] = g[i] * (left + right);
    }
  });
}

}  // namespace tinyddp::cpu
