// CPU elementwise kernels: add/sub/mul/div, alpha*a + beta*b, the broadcast bias add, ReLU and GELU with
// their backwards. The loops are in tensor/internal/cpu_isa_elementwise.cc, built for each instruction-set
// variant; here the tensors are unpacked into pointers and lengths.
#include "tensor/internal/cpu_common.h"
#include "tensor/internal/cpu_isa_kernels.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void BinaryOp(BinaryKind op, const Tensor& a, const Tensor& b, Tensor& out) {
  DispatchFloat(a.dtype(), "BinaryOp", [&](auto tag) {
    using T = decltype(tag);
    const IsaKernels<T>& k = ActiveIsaKernels<T>();
    auto* fn = op == BinaryKind::kAdd ? k.add : op == BinaryKind::kSub ? k.sub : op == BinaryKind::kMul ? k.mul : k.div;
    fn(a.data<T>(), b.data<T>(), out.data<T>(), out.numel());
  });
}

void Axpby(double alpha, const Tensor& a, double beta, const Tensor& b, Tensor& out) {
  DispatchFloat(a.dtype(), "Axpby", [&](auto tag) {
    using T = decltype(tag);
    // Scalars are rounded to the tensor's type first, as PyTorch does for add(alpha=...) and mul.
    ActiveIsaKernels<T>().axpby(static_cast<T>(alpha), a.data<T>(), static_cast<T>(beta),
                                b.defined() ? b.data<T>() : nullptr, out.data<T>(), out.numel());
  });
}

void AddRowVector(const Tensor& x, const Tensor& row, Tensor& out) {
  DispatchFloat(x.dtype(), "AddRowVector", [&](auto tag) {
    using T = decltype(tag);
    ActiveIsaKernels<T>().add_row_vector(x.data<T>(), row.data<T>(), out.data<T>(), x.size(0), x.size(1));
  });
}

void Relu(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "Relu", [&](auto tag) {
    using T = decltype(tag);
    ActiveIsaKernels<T>().relu(x.data<T>(), out.data<T>(), out.numel());
  });
}

void ReluBackward(const Tensor& grad, const Tensor& y, Tensor& out) {
  DispatchFloat(grad.dtype(), "ReluBackward", [&](auto tag) {
    using T = decltype(tag);
    ActiveIsaKernels<T>().relu_backward(grad.data<T>(), y.data<T>(), out.data<T>(), out.numel());
  });
}

void Gelu(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "Gelu", [&](auto tag) {
    using T = decltype(tag);
    ActiveIsaKernels<T>().gelu(x.data<T>(), out.data<T>(), out.numel());
  });
}

void GeluBackward(const Tensor& grad, const Tensor& x, Tensor& out) {
  DispatchFloat(grad.dtype(), "GeluBackward", [&](auto tag) {
    using T = decltype(tag);
    ActiveIsaKernels<T>().gelu_backward(grad.data<T>(), x.data<T>(), out.data<T>(), out.numel());
  });
}

}  // namespace tinyddp::cpu
