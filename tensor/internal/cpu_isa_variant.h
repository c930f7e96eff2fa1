// Internal to one instruction-set variant: the kernels cpu_isa_gemm.cc, cpu_isa_elementwise.cc and
// cpu_isa_optim.cc define and cpu_isa_table.cc gathers into the variant's IsaKernelTable. Included only by
// those four files, which tensor/BUILD compiles once per variant with -DTINYDDP_CPU_ISA_NS=<variant>, so
// every name below lives in tinyddp::cpu::sse2, ::avx2 or ::avx512 (see cpu_isa_kernels.h for why).
// Each template is instantiated for float and double in its .cc file.
#ifndef TINYDDP_TENSOR_INTERNAL_CPU_ISA_VARIANT_H_
#define TINYDDP_TENSOR_INTERNAL_CPU_ISA_VARIANT_H_

#ifndef TINYDDP_CPU_ISA_NS
#error "compiled once per variant by tensor/BUILD, with -DTINYDDP_CPU_ISA_NS=sse2|avx2|avx512"
#endif

#include <cstdint>

#include "tensor/internal/cpu_isa_kernels.h"

namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS {

// cpu_isa_gemm.cc
template <typename T>
void Gemm(const GemmArgs<T>& args);
template <typename T>
void Linear(int64_t m, int64_t n, int64_t k, const T* x, const T* w, const T* bias, T* out);

// cpu_isa_elementwise.cc
template <typename T>
void Add(const T* a, const T* b, T* out, int64_t n);
template <typename T>
void Sub(const T* a, const T* b, T* out, int64_t n);
template <typename T>
void Mul(const T* a, const T* b, T* out, int64_t n);
template <typename T>
void Div(const T* a, const T* b, T* out, int64_t n);
template <typename T>
void Axpby(T alpha, const T* a, T beta, const T* b, T* out, int64_t n);
template <typename T>
void AddRowVector(const T* x, const T* row, T* out, int64_t rows, int64_t cols);
template <typename T>
void Relu(const T* x, T* out, int64_t n);
template <typename T>
void ReluBackward(const T* grad, const T* y, T* out, int64_t n);
template <typename T>
void Gelu(const T* x, T* out, int64_t n);
template <typename T>
void GeluBackward(const T* grad, const T* x, T* out, int64_t n);

// cpu_isa_optim.cc
template <typename T>
void SgdStep(T* param, const T* grad, T* momentum_buf, int64_t n, const SgdScalars<T>& s);
template <typename T>
void AdamStep(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamScalars<T>& s);

}  // namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS

#endif  // TINYDDP_TENSOR_INTERNAL_CPU_ISA_VARIANT_H_
