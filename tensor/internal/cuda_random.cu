// CUDA random initialisation: uniform and normal tensors from Philox4x32-10.
//
// Element i is a pure function of (seed, offset + i), computed by the very code the CPU kernels run
// (tensor/internal/philox.h, compiled here by nvcc), so a model initialised on a GPU starts from the
// same bits as one initialised on the CPU, whatever the grid shape. One thread per element; each
// element costs one Philox block (and, for normals, a double-precision log and cos), cheap next to a
// training run that initialises once.
#include <type_traits>

#include "tensor/internal/cuda_common.cuh"
#include "tensor/internal/kernels.h"
#include "tensor/internal/philox.h"

namespace tinyddp::cuda {
namespace {

using internal::Bf16;
using internal::kThreads;
using internal::LaunchScope;

/// The three dtypes a random tensor may have, each narrowed from the draw as the CPU kernel does.
template <typename T>
struct Uniform {
  double low, high;
  __device__ T operator()(uint64_t seed, uint64_t index) const {
    if constexpr (std::is_same_v<T, double>) {
      return philox::UniformF64(seed, index, low, high);
    } else if constexpr (std::is_same_v<T, float>) {
      return philox::UniformF32(seed, index, low, high);
    } else {
      return internal::Bf16FromFloat(philox::UniformF32(seed, index, low, high));
    }
  }
};

template <typename T>
struct Normal {
  double mean, stddev;
  __device__ T operator()(uint64_t seed, uint64_t index) const {
    const double z = philox::Normal(seed, index, mean, stddev);
    if constexpr (std::is_same_v<T, double>) {
      return z;
    } else if constexpr (std::is_same_v<T, float>) {
      return static_cast<float>(z);
    } else {
      return internal::Bf16FromFloat(static_cast<float>(z));
    }
  }
};

template <typename T, typename Draw>
__global__ void RandomKernel(T* out, int64_t n, uint64_t seed, uint64_t offset, Draw draw) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = draw(seed, offset + static_cast<uint64_t>(i));
  }
}

template <template <typename> class Draw>
void Launch(const char* op, Tensor& out, double p0, double p1, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchScope scope(out);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    auto kernel = RandomKernel<T, Draw<T>>;
    kernel<<<internal::GridFor(kernel, n, scope.device()), kThreads, 0, scope.stream()>>>(
        static_cast<T*>(out.data_ptr()), n, seed, offset, Draw<T>{p0, p1});
    CUDA_LAUNCH_CHECK();
  };
  switch (out.dtype()) {
    case DType::kFloat32:
      return launch(float{});
    case DType::kFloat64:
      return launch(double{});
    case DType::kBFloat16:
      return launch(Bf16{});
    default:
      TINYDDP_CHECK_OP(false, op, "needs a floating-point tensor, got ", DTypeName(out.dtype()));
  }
}

}  // namespace

void UniformInit(Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  Launch<Uniform>("UniformInit", out, low, high, seed, offset);
}

void NormalInit(Tensor& out, double mean, double stddev, uint64_t seed, uint64_t offset) {
  Launch<Normal>("NormalInit", out, mean, stddev, seed, offset);
}

}  // namespace tinyddp::cuda
