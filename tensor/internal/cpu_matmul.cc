// CPU matrix products: MatMul (with transpose flags, alpha and beta) and Linear. The GEMM itself is
// Eigen's, built for each instruction-set variant (tensor/internal/cpu_isa_gemm.cc); here the tensors
// are unpacked into the raw row-major buffers and sizes it takes.
#include "tensor/internal/cpu_common.h"
#include "tensor/internal/cpu_isa_kernels.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta, Tensor& out) {
  DispatchFloat(a.dtype(), "MatMul", [&](auto tag) {
    using T = decltype(tag);
    GemmArgs<T> g;
    g.m = out.size(0);
    g.n = out.size(1);
    g.k = trans_a ? a.size(0) : a.size(1);
    g.a = a.data<T>();
    g.trans_a = trans_a;
    g.b = b.data<T>();
    g.trans_b = trans_b;
    g.alpha = static_cast<T>(alpha);
    g.beta = static_cast<T>(beta);
    g.c = out.data<T>();
    ActiveIsaKernels<T>().gemm(g);
  });
}

void Linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  DispatchFloat(x.dtype(), "Linear", [&](auto tag) {
    using T = decltype(tag);
    ActiveIsaKernels<T>().linear(x.size(0), w.size(0), x.size(1), x.data<T>(), w.data<T>(),
                                 bias.defined() ? bias.data<T>() : nullptr, out.data<T>());
  });
}

}  // namespace tinyddp::cpu
