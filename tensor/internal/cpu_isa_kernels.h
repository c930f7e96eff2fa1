// Internal: the hot CPU kernels (GEMM, elementwise, optimizer steps) as a table of functions on raw
// pointers, one table per instruction-set variant (tensor/cpu_isa.h). The Tensor-level CPU kernels in
// tensor/internal/cpu_*.cc unpack their tensors and call through ActiveIsaKernels<T>().
//
// Each variant is the same sources (cpu_isa_gemm.cc, cpu_isa_elementwise.cc, cpu_isa_optim.cc,
// cpu_isa_table.cc) compiled again with its own -march and -DTINYDDP_CPU_ISA_NS=sse2|avx2|avx512, which
// puts everything they define into namespace tinyddp::cpu::<variant>. Two rules keep one binary safe on
// every x86-64 CPU:
//   * Nothing an AVX variant compiles may be shared with another variant. Inline functions and template
//     instantiations are weak symbols, and the linker keeps ONE copy of each: if the AVX-512 copy of
//     a shared template won, a CPU without AVX-512 would crash on it. So the variants see no Tensor (its
//     inline accessors would be shared), only this header, which declares plain structs and no inline
//     functions, and Eigen's namespace is renamed per variant (cpu_isa_gemm.cc). The test
//     //tensor:cpu_isa_symbols_test checks the compiled variants for any weak symbol outside their namespace.
//   * A variant runs only on a CPU that has its instructions: IsaKernelsFor() returns null otherwise.
// Preconditions of every kernel: contiguous buffers of the stated lengths; `out` may alias an input only
// where the comment says so.
#ifndef TINYDDP_TENSOR_INTERNAL_CPU_ISA_KERNELS_H_
#define TINYDDP_TENSOR_INTERNAL_CPU_ISA_KERNELS_H_

#include <cstdint>

namespace tinyddp {

enum class CpuIsa;  // tensor/cpu_isa.h

namespace cpu {

/// c[m, n] = alpha * op(a) @ op(b) + beta * c, all row-major; a is [m, k] ([k, m] if trans_a), b is [k, n]
/// ([n, k] if trans_b). beta == 0 never reads c. c does not overlap a or b.
template <typename T>
struct GemmArgs {
  int64_t m, n, k;
  const T* a;
  bool trans_a;
  const T* b;
  bool trans_b;
  T alpha, beta;
  T* c;
};

/// The scalars of one SGD step, rounded to T as torch.optim does (see cpu_optim.cc).
template <typename T>
struct SgdScalars {
  T lr, weight_decay, momentum, keep;  // keep = 1 - dampening
  bool has_weight_decay, first_step, nesterov;
};

/// The scalars of one Adam/AdamW step (see cpu_optim.cc).
template <typename T>
struct AdamScalars {
  T decay, weight_decay, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps;
  bool has_weight_decay, decoupled;
};

/// The kernels of one variant for element type T (float or double). n counts elements.
template <typename T>
struct IsaKernels {
  void (*gemm)(const GemmArgs<T>& args);
  /// out[m, n] = x[m, k] @ w[n, k]^T + bias[n] (bias may be null).
  void (*linear)(int64_t m, int64_t n, int64_t k, const T* x, const T* w, const T* bias, T* out);
  // out = a (op) b; out may alias a or b.
  void (*add)(const T* a, const T* b, T* out, int64_t n);
  void (*sub)(const T* a, const T* b, T* out, int64_t n);
  void (*mul)(const T* a, const T* b, T* out, int64_t n);
  void (*div)(const T* a, const T* b, T* out, int64_t n);
  /// out = alpha * a + beta * b, or alpha * a when b is null; out may alias a.
  void (*axpby)(T alpha, const T* a, T beta, const T* b, T* out, int64_t n);
  /// out[r, c] = x[r, c] + row[c].
  void (*add_row_vector)(const T* x, const T* row, T* out, int64_t rows, int64_t cols);
  void (*relu)(const T* x, T* out, int64_t n);
  void (*relu_backward)(const T* grad, const T* y, T* out, int64_t n);
  void (*gelu)(const T* x, T* out, int64_t n);
  void (*gelu_backward)(const T* grad, const T* x, T* out, int64_t n);
  /// One SGD step of n parameters in place; momentum_buf is null without momentum.
  void (*sgd_step)(T* param, const T* grad, T* momentum_buf, int64_t n, const SgdScalars<T>& s);
  /// One Adam/AdamW step of n parameters in place.
  void (*adam_step)(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamScalars<T>& s);
};

/// Everything one variant provides.
struct IsaKernelTable {
  const char* name;  // "sse2", "avx2", "avx512"
  IsaKernels<float> f32;
  IsaKernels<double> f64;
};

// The tables, defined by cpu_isa_table.cc in each variant's namespace.
namespace sse2 {
const IsaKernelTable& Kernels();
}
namespace avx2 {
const IsaKernelTable& Kernels();
}
namespace avx512 {
const IsaKernelTable& Kernels();
}

/// The table of `isa`, or nullptr when this CPU does not run it (for tests that compare the variants).
const IsaKernelTable* IsaKernelsFor(CpuIsa isa);

/// The table of ActiveCpuIsa(): what the CPU kernels call.
const IsaKernelTable& ActiveIsaKernelTable();

/// The active kernels for element type T (float or double).
template <typename T>
const IsaKernels<T>& ActiveIsaKernels();
template <>
const IsaKernels<float>& ActiveIsaKernels<float>();
template <>
const IsaKernels<double>& ActiveIsaKernels<double>();

}  // namespace cpu
}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_INTERNAL_CPU_ISA_KERNELS_H_
