// Elementwise CPU loops, compiled once per instruction-set variant (see cpu_isa_kernels.h): add/sub/mul/
// div, alpha*a + beta*b, the broadcast bias add, ReLU and GELU with their backwards. Each is a plain loop
// over contiguous memory that the compiler vectorises at the variant's width (4, 8 or 16 floats at a
// time); the (rare) aliasing of out with an input is handled by its runtime overlap check. With
// -ffp-contract=off no multiply-add is fused, so every variant computes bit-identical results.
#include <cmath>

#include "tensor/internal/cpu_isa_variant.h"

namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS {

template <typename T>
void Add(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
template <typename T>
void Sub(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
}
template <typename T>
void Mul(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
template <typename T>
void Div(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] / b[i];
}

template <typename T>
void Axpby(T alpha, const T* a, T beta, const T* b, T* out, int64_t n) {
  if (b == nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * a[i];
  } else if (alpha == T(1)) {  // AddInto: dst += beta * src, the gradient-accumulation case
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + beta * b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * a[i] + beta * b[i];
  }
}

template <typename T>
void AddRowVector(const T* x, const T* row, T* out, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[i * cols + j] + row[j];
  }
}

template <typename T>
void Relu(const T* x, T* out, int64_t n) {
  // `v < 0 ? 0 : v` rather than max(v, 0): NaN stays NaN, as in torch.relu.
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] < T(0) ? T(0) : x[i];
}

template <typename T>
void ReluBackward(const T* grad, const T* y, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = y[i] <= T(0) ? T(0) : grad[i];  // PyTorch's threshold_backward
}

namespace {
// GELU, tanh approximation (PyTorch's approximate='tanh'): kBeta = sqrt(2/pi), kKappa = 0.044715.
constexpr double kBeta = 0.7978845608028654;
constexpr double kKappa = 0.044715;
}  // namespace

template <typename T>
void Gelu(const T* x, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T inner = T(kBeta) * (v + T(kKappa) * v * v * v);
    out[i] = T(0.5) * v * (T(1) + std::tanh(inner));
  }
}

template <typename T>
void GeluBackward(const T* grad, const T* x, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // d/dx [0.5 x (1 + tanh(u))] with u = kBeta (x + kKappa x^3):
    //   0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) kBeta (1 + 3 kKappa x^2)
    const T v = x[i];
    const T v2 = v * v;
    const T t = std::tanh(T(kBeta) * (v + T(kKappa) * v2 * v));
    const T left = T(0.5) * (T(1) + t);
    const T right = T(0.5) * v * (T(1) - t * t) * T(kBeta) * (T(1) + T(3 * kKappa) * v2);
    out[i] = grad[i] * (left + right);
  }
}

#define TINYDDP_INSTANTIATE(T)                                                 \
  template void Add<T>(const T*, const T*, T*, int64_t);                      \
  template void Sub<T>(const T*, const T*, T*, int64_t);                      \
  template void Mul<T>(const T*, const T*, T*, int64_t);                      \
  template void Div<T>(const T*, const T*, T*, int64_t);                      \
  template void Axpby<T>(T, const T*, T, const T*, T*, int64_t);              \
  template void AddRowVector<T>(const T*, const T*, T*, int64_t, int64_t);    \
  template void Relu<T>(const T*, T*, int64_t);                               \
  template void ReluBackward<T>(const T*, const T*, T*, int64_t);             \
  template void Gelu<T>(const T*, T*, int64_t);                               \
  template void GeluBackward<T>(const T*, const T*, T*, int64_t);
TINYDDP_INSTANTIATE(float)
TINYDDP_INSTANTIATE(double)
#undef TINYDDP_INSTANTIATE

}  // namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS
