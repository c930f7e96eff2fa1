// CPU matrix products: MatMul (with transpose flags, alpha and beta) and Linear, on Eigen.
//
// Our tensors are row-major and contiguous, so each operand is wrapped in an Eigen::Map of a RowMajor
// matrix: no copy, and a transpose flag becomes Eigen's .transpose() view, which its GEMM reads in
// place. `noalias()` tells Eigen the output does not overlap the inputs (ops.cc checks that), so it
// writes the product straight into `out` instead of into a temporary. Eigen uses one thread here:
// CPU data parallelism in tinyddp comes from one process per core, as with PyTorch's gloo backend.
#include <Eigen/Core>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {
namespace {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix<T>>;
template <typename T>
using MatrixMap = Eigen::Map<RowMajorMatrix<T>>;

template <typename T>
ConstMatrixMap<T> View(const Tensor& t) {
  return ConstMatrixMap<T>(t.data<T>(), t.size(0), t.size(1));
}

// c = alpha * x * y (+ beta * c): one function for the four transpose combinations.
template <typename T, typename X, typename Y>
void Gemm(const X& x, const Y& y, T alpha, T beta, MatrixMap<T>& c) {
  if (beta == T(0)) {
    // beta == 0 must not read c: it may hold uninitialised memory (NaN * 0 is NaN).
    c.noalias() = (alpha * x) * y;  // Eigen folds alpha into its GEMM call
  } else {
    if (beta != T(1)) c *= beta;
    c.noalias() += (alpha * x) * y;
  }
}

}  // namespace

void MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta, Tensor& out) {
  DispatchFloat(a.dtype(), "MatMul", [&](auto tag) {
    using T = decltype(tag);
    MatrixMap<T> c(out.data<T>(), out.size(0), out.size(1));
    const auto x = View<T>(a);
    const auto y = View<T>(b);
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    if (!trans_a && !trans_b) Gemm(x, y, al, be, c);
    if (!trans_a && trans_b) Gemm(x, y.transpose(), al, be, c);
    if (trans_a && !trans_b) Gemm(x.transpose(), y, al, be, c);
    if (trans_a && trans_b) Gemm(x.transpose(), y.transpose(), al, be, c);
  });
}

void Linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  DispatchFloat(x.dtype(), "Linear", [&](auto tag) {
    using T = decltype(tag);
    MatrixMap<T> c(out.data<T>(), out.size(0), out.size(1));
    c.noalias() = View<T>(x) * View<T>(w).transpose();
    if (bias.defined()) {
      Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> b(bias.data<T>(), bias.size(0));
      c.rowwise() += b;
    }
  });
}

}  // namespace tinyddp::cpu
