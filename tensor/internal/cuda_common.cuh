// What every CUDA kernel file of tensor/ shares: where to launch (device, stream, grid size), 16-byte
// vector packs, block-wide reductions with warp shuffles, IEEE operations nvcc may not fuse, dtype
// dispatch, and per-stream scratch memory. Internal; included only by tensor/internal/cuda_*.cu.
#ifndef TINYDDP_TENSOR_INTERNAL_CUDA_COMMON_CUH_
#define TINYDDP_TENSOR_INTERNAL_CUDA_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tensor/dtype.h"
#include "base/check.h"
#include "tensor/internal/cuda_check.h"
#include "tensor/internal/cuda_context.h"
#include "tensor/tensor.h"

namespace tinyddp::cuda::internal {

// --- Where to launch ---------------------------------------------------------------------------------

/// Every launcher opens one: it makes the tensor's GPU current and names its current stream, which is
/// where the kernel goes (docs/design.md, "Streams"). Nothing here waits for the GPU.
class LaunchScope {
 public:
  explicit LaunchScope(const Tensor& t) : device_(t.device().index), guard_(device_) {
    stream_ = CurrentStreamHandle(device_);
  }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  int device_;
  DeviceGuard guard_;
  cudaStream_t stream_ = nullptr;
};

/// Threads per block of the elementwise and multi-tensor kernels.
constexpr int kThreads = 256;

/// Streaming multiprocessors on `device` (cached).
int SmCount(int device);

/// How many blocks of `kernel` (at `threads` threads) fit on the whole GPU at once (cached per kernel).
/// Grid-stride kernels launch at most this many: a second, partial wave of blocks would leave most of
/// the GPU idle while it runs.
int ResidentBlocks(const void* kernel, int threads, int device);

/// Blocks for a grid-stride kernel with `items` units of work (one unit per thread per iteration).
template <typename Kernel>
int GridFor(Kernel kernel, int64_t items, int device, int threads = kThreads) {
  const int64_t wanted = (items + threads - 1) / threads;
  const int64_t resident = ResidentBlocks(reinterpret_cast<const void*>(kernel), threads, device);
  const int64_t blocks = wanted < resident ? wanted : resident;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

// --- Scratch memory ----------------------------------------------------------------------------------

/// Device memory owned by one (device, stream) for one purpose, for kernels that need temporary space.
/// Obtained from the caching allocator the first time that stream needs it (or needs more) and kept
/// afterwards, so a steady-state step allocates nothing. Safe without locks on the GPU side because every
/// user of a stream's scratch runs on that stream, one kernel after another. `fresh`, if given, is set
/// when the block is new (its contents are garbage).
enum class ScratchKind { kReduce, kGemmWorkspace };
void* StreamScratch(ScratchKind kind, int device, cudaStream_t stream, size_t bytes, bool* fresh = nullptr);

/// The reduction scratch: a completion counter (zero between kernels) and one double per block or row.
struct ReduceScratch {
  unsigned int* counter;
  double* partials;
};
ReduceScratch GetReduceScratch(int device, cudaStream_t stream, int64_t num_partials);

// --- Element types on the device ---------------------------------------------------------------------

/// bfloat16 as the kernels see it: the raw 16 bits (tinyddp::BFloat16 has host-only member functions).
struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == sizeof(BFloat16), "Bf16 mirrors tinyddp::BFloat16");

/// Round to nearest even, NaN to the canonical quiet NaN: exactly BFloat16::FromFloat (tensor/dtype.h).
__device__ __forceinline__ Bf16 Bf16FromFloat(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{0x7fc0};
  u += 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<uint16_t>(u >> 16)};
}
__device__ __forceinline__ float Bf16ToFloat(Bf16 b) { return __uint_as_float(static_cast<uint32_t>(b.bits) << 16); }

// Storage type and compute type. A kernel templated on the storage type S of its tensors computes in
// Compute<S>: float for Bf16, S itself for float and double. It widens what it loads (exact) and narrows
// what it stores (round to nearest even for Bf16), so bfloat16 math is float math rounded once per
// result, as on the CPU (cpu_bf16.cc). For float and double both are the identity.
template <typename S>
struct ComputeOf {
  using type = S;
};
template <>
struct ComputeOf<Bf16> {
  using type = float;
};
template <typename S>
using Compute = typename ComputeOf<S>::type;

template <typename S>
__device__ __forceinline__ Compute<S> Widen(S v) {
  return v;
}
__device__ __forceinline__ float Widen(Bf16 v) { return Bf16ToFloat(v); }
template <typename S, typename T>
__device__ __forceinline__ S Narrow(T v) {
  if constexpr (std::is_same_v<S, Bf16>) {
    return Bf16FromFloat(static_cast<float>(v));
  } else {
    return static_cast<S>(v);
  }
}

/// A tensor's elements as storage type S (Tensor::data<T>() knows the host types, not Bf16).
template <typename S>
S* DataAs(const Tensor& t) {
  return static_cast<S*>(t.data_ptr());
}

/// 16 bytes of T: one 128-bit load or store, the widest a thread can issue.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

__host__ __device__ __forceinline__ bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// --- IEEE operations that nvcc will not fuse ---------------------------------------------------------
// nvcc contracts a*b+c into one fma by default; the CPU kernels (built with -ffp-contract=off) round
// twice. Where CPU and GPU should agree bit for bit, kernels spell each rounding out with these.

__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float Sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double Sqrt(double a) { return __dsqrt_rn(a); }

// --- Block reductions --------------------------------------------------------------------------------

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {  // NaN-ignoring like the CPU's `x > m ? x : m`, applied in a fixed order
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

/// Reduces over the 32 lanes of a warp with butterfly shuffles; every lane gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T WarpAllReduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Reduces over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
/// result. The tree is fixed, so the result is deterministic. Every thread of the block must call it.
template <typename T, typename Op>
__device__ __forceinline__ T BlockAllReduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpAllReduce(v, op);
  __syncthreads();  // earlier readers of `partial` are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  return WarpAllReduce(v, op);
}

// --- Dispatch ----------------------------------------------------------------------------------------

/// Calls fn(T{}) with T = float or double for `dtype`. ops.cc admits only those two for math ops, so
/// anything else is a bug in tinyddp and stops with a message naming the op.
template <typename Fn>
void DispatchFloat(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn(float{});
      return;
    case DType::kFloat64:
      fn(double{});
      return;
    default:
      break;
  }
  TINYDDP_CHECK_OP(false, op, "the CUDA kernel handles float32 and float64, not ", DTypeName(dtype));
}

/// Calls fn(S{}) with the storage type S = float, double or Bf16 of `dtype`: the math kernels, which
/// compute in Compute<S>. Anything else is a bug in tinyddp (ops.cc checks) and stops naming the op.
template <typename Fn>
void DispatchFloatOrBf16(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn(float{});
      return;
    case DType::kFloat64:
      fn(double{});
      return;
    case DType::kBFloat16:
      fn(Bf16{});
      return;
    default:
      break;
  }
  TINYDDP_CHECK_OP(false, op, "the CUDA kernel handles float32, float64 and bfloat16, not ", DTypeName(dtype));
}

/// For a kernel with input storage type S: calls fn(O{}) with the output's storage type, S itself, or
/// float for the float32 result of bfloat16 input (the mixed sums and losses of ops.h).
template <typename S, typename Fn>
void DispatchOut(DType out_dtype, Fn&& fn) {
  if constexpr (std::is_same_v<S, Bf16>) {
    if (out_dtype == DType::kFloat32) return fn(float{});
  }
  fn(S{});
}

/// Calls fn(T{}) with the device element type of each of the six dtypes (Bf16 for bfloat16).
template <typename Fn>
void DispatchAll(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn(float{});
      return;
    case DType::kFloat64:
      fn(double{});
      return;
    case DType::kBFloat16:
      fn(Bf16{});
      return;
    case DType::kInt32:
      fn(int32_t{});
      return;
    case DType::kInt64:
      fn(int64_t{});
      return;
    case DType::kUInt8:
      fn(uint8_t{});
      return;
  }
}

}  // namespace tinyddp::cuda::internal

#endif  // TINYDDP_TENSOR_INTERNAL_CUDA_COMMON_CUH_
