// Picks the IsaKernelTable the CPU kernels call: the variant ActiveCpuIsa() names (tensor/cpu_isa.h),
// looked up once. Compiled for the baseline like the rest of the library: only the tables' functions
// use wider instructions, and only this file decides whether they may run.
#include "tensor/cpu_isa.h"
#include "tensor/internal/cpu_isa_kernels.h"

namespace tinyddp::cpu {

const IsaKernelTable* IsaKernelsFor(CpuIsa isa) {
  if (isa > DetectedCpuIsa()) return nullptr;  // this CPU would stop at the first wider instruction
  switch (isa) {
    case CpuIsa::kSse2: return &sse2::Kernels();
    case CpuIsa::kAvx2: return &avx2::Kernels();
    case CpuIsa::kAvx512: return &avx512::Kernels();
  }
  return nullptr;
}

const IsaKernelTable& ActiveIsaKernelTable() {
  static const IsaKernelTable* const table = IsaKernelsFor(ActiveCpuIsa());
  return *table;
}

template <>
const IsaKernels<float>& ActiveIsaKernels<float>() {
  return ActiveIsaKernelTable().f32;
}
template <>
const IsaKernels<double>& ActiveIsaKernels<double>() {
  return ActiveIsaKernelTable().f64;
}

}  // namespace tinyddp::cpu
