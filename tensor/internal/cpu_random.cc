// CPU random initialisation: element i of `out` is a pure function of (seed, offset + i), computed by
// the same Philox and transform code (tensor/internal/philox.h) as the CUDA kernels, so a model
// initialised on the CPU and one initialised on a GPU start from bit-identical weights.
#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"
#include "tensor/internal/philox.h"

namespace tinyddp::cpu {

void UniformInit(Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  switch (out.dtype()) {
    case DType::kFloat32: {
      float* o = out.data<float>();
      for (int64_t i = 0; i < n; ++i) o[i] = philox::UniformF32(seed, offset + i, low, high);
      return;
    }
    case DType::kFloat64: {
      double* o = out.data<double>();
      for (int64_t i = 0; i < n; ++i) o[i] = philox::UniformF64(seed, offset + i, low, high);
      return;
    }
    case DType::kBFloat16: {
      BFloat16* o = out.data<BFloat16>();
      for (int64_t i = 0; i < n; ++i) o[i] = BFloat16(philox::UniformF32(seed, offset + i, low, high));
      return;
    }
    default:
      TINYDDP_CHECK_OP(false, "UniformInit", "needs a floating-point tensor, got ", DTypeName(out.dtype()));
  }
}

void NormalInit(Tensor& out, double mean, double stddev, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  switch (out.dtype()) {
    case DType::kFloat32: {
      float* o = out.data<float>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(philox::Normal(seed, offset + i, mean, stddev));
      return;
    }
    case DType::kFloat64: {
      double* o = out.data<double>();
      for (int64_t i = 0; i < n; ++i) o[i] = philox::Normal(seed, offset + i, mean, stddev);
      return;
    }
    case DType::kBFloat16: {
      BFloat16* o = out.data<BFloat16>();
      for (int64_t i = 0; i < n; ++i) {
        o[i] = BFloat16(static_cast<float>(philox::Normal(seed, offset + i, mean, stddev)));
      }
      return;
    }
    default:
      TINYDDP_CHECK_OP(false, "NormalInit", "needs a floating-point tensor, got ", DTypeName(out.dtype()));
  }
}

}  // namespace tinyddp::cpu
