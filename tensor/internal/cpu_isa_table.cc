// One variant's IsaKernelTable (see cpu_isa_kernels.h): the addresses of the kernels this variant's
// compilation of cpu_isa_gemm.cc, cpu_isa_elementwise.cc and cpu_isa_optim.cc defined.
#include "tensor/internal/cpu_isa_variant.h"

#define TINYDDP_STRINGIFY_INNER(x) #x
#define TINYDDP_STRINGIFY(x) TINYDDP_STRINGIFY_INNER(x)

namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS {
namespace {

template <typename T>
constexpr IsaKernels<T> KernelsOf() {
  return {&Gemm<T>, &Linear<T>, &Add<T>, &Sub<T>, &Mul<T>, &Div<T>, &Axpby<T>, &AddRowVector<T>, &Relu<T>,
          &ReluBackward<T>, &Gelu<T>, &GeluBackward<T>, &SgdStep<T>, &AdamStep<T>};
}

constexpr IsaKernelTable kTable = {TINYDDP_STRINGIFY(TINYDDP_CPU_ISA_NS), KernelsOf<float>(), KernelsOf<double>()};

}  // namespace

const IsaKernelTable& Kernels() { return kTable; }

}  // namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS
