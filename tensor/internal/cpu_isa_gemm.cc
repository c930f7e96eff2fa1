// GEMM and Linear on Eigen, compiled once per instruction-set variant (see cpu_isa_kernels.h): with
// -march=x86-64-v3 Eigen's kernels use 256-bit AVX2 registers and FMA, with x86-64-v4 512-bit AVX-512,
// with the baseline 128-bit SSE2. That one flag is most of the CPU speed: ~2x per step on an AVX2 machine.
//
// Our tensors are row-major and contiguous, so each operand is wrapped in an Eigen::Map of a RowMajor
// matrix: no copy, and a transpose flag becomes Eigen's .transpose() view, which its GEMM reads in
// place. `noalias()` tells Eigen the output does not overlap the inputs (ops.cc checks that), so it
// writes the product straight into `out` instead of into a temporary. Eigen uses one thread here:
// CPU data parallelism in tinyddp comes from one process per core, as with PyTorch's gloo backend.
#ifndef TINYDDP_CPU_ISA_NS
#error "compiled once per variant by tensor/BUILD, with -DTINYDDP_CPU_ISA_NS and -DTINYDDP_EIGEN_NS"
#endif

// Eigen is all inline templates. Instantiated here with this variant's -march, Eigen::internal::gebp_kernel
// <float, ...> would have the same mangled name in every variant, and the linker would keep one copy for
// all of them: perhaps the AVX-512 one, on a CPU without AVX-512. Renaming Eigen's namespace for this
// translation unit (to eigen_sse2, eigen_avx2, eigen_avx512) gives each variant symbols of its own.
#define Eigen TINYDDP_EIGEN_NS
#include <Eigen/Core>

#include "tensor/internal/cpu_isa_kernels.h"
#include "tensor/internal/cpu_isa_variant.h"

namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS {
namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>>;
template <typename T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>>;

// c = alpha * x * y (+ beta * c): one function for the four transpose combinations.
template <typename T, typename X, typename Y>
void Product(const X& x, const Y& y, T alpha, T beta, MatrixMap<T>& c) {
  if (beta == T(0)) {
    // beta == 0 must not read c: it may hold uninitialised memory (NaN * 0 is NaN).
    c.noalias() = (alpha * x) * y;  // Eigen folds alpha into its GEMM call
  } else {
    if (beta != T(1)) c *= beta;
    c.noalias() += (alpha * x) * y;
  }
}

}  // namespace

template <typename T>
void Gemm(const GemmArgs<T>& g) {
  MatrixMap<T> c(g.c, g.m, g.n);
  const ConstMatrixMap<T> x(g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k);
  const ConstMatrixMap<T> y(g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n);
  if (!g.trans_a && !g.trans_b) Product(x, y, g.alpha, g.beta, c);
  if (!g.trans_a && g.trans_b) Product(x, y.transpose(), g.alpha, g.beta, c);
  if (g.trans_a && !g.trans_b) Product(x.transpose(), y, g.alpha, g.beta, c);
  if (g.trans_a && g.trans_b) Product(x.transpose(), y.transpose(), g.alpha, g.beta, c);
}

template <typename T>
void Linear(int64_t m, int64_t n, int64_t k, const T* x, const T* w, const T* bias, T* out) {
  MatrixMap<T> c(out, m, n);
  c.noalias() = ConstMatrixMap<T>(x, m, k) * ConstMatrixMap<T>(w, n, k).transpose();
  if (bias != nullptr) c.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, n);
}

template void Gemm<float>(const GemmArgs<float>&);
template void Gemm<double>(const GemmArgs<double>&);
template void Linear<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*);
template void Linear<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*, double*);

}  // namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS
