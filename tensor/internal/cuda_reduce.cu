// CUDA reductions: the sum of everything (and the MSE loss, which is the same reduction of (a-b)^2),
// the sum along one dim, the sum of the rows into a vector (a bias gradient, written or accumulated),
// and argmax along the last dim (the CPU half is cpu_reduce.cc / cpu_loss.cc / cpu_bf16_fused.cc).
// Each kernel takes the input's storage type S and the output's O: O is S, or float for the float32
// result of bfloat16 input (ops.h's mixed sums and losses).
//
// Sums accumulate in double, like the CPU kernels, so both agree to float32 rounding however long
// the tensor. They are also deterministic: no atomic float additions, whose order would change from
// run to run. A whole-tensor sum runs as one launch: every block writes its partial sum to per-stream
// scratch, and the last block to finish (found with an atomic counter) adds the partials in a fixed
// order and writes the result.
#include "tensor/internal/cuda_common.cuh"
#include "tensor/internal/kernels.h"

namespace tinyddp::cuda {
namespace {

using internal::BlockAllReduce;
using internal::Compute;
using internal::DataAs;
using internal::kThreads;
using internal::LaunchScope;
using internal::Narrow;
using internal::Pack;
using internal::ReduceScratch;
using internal::SumOp;
using internal::Widen;

/// An element as the double the sums accumulate.
template <typename S>
__device__ __forceinline__ double D(S v) {
  return static_cast<double>(Widen(v));
}

// --- Kernels -----------------------------------------------------------------------------------------

/// The block's share of the grid-stride walk, then the last block combines all partials:
/// *out = sum / divisor, with sum over x[i] or, with kSquaredDiff, over (a[i] - b[i])^2.
template <typename S, bool kSquaredDiff, typename O>
__global__ void ReduceAllKernel(const S* a, const S* b, int64_t n, int64_t packs, double divisor, O* out,
                                ReduceScratch scratch) {
  using P = Pack<S>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double acc = 0;
  for (int64_t p = first; p < packs; p += stride) {
    const P x = reinterpret_cast<const P*>(a)[p];
    if constexpr (kSquaredDiff) {
      const P y = reinterpret_cast<const P*>(b)[p];
#pragma unroll
      for (int k = 0; k < P::kSize; ++k) {
        const double d = D(x.v[k]) - D(y.v[k]);
        acc += d * d;
      }
    } else {
#pragma unroll
      for (int k = 0; k < P::kSize; ++k) acc += D(x.v[k]);
    }
  }
  for (int64_t i = packs * P::kSize + first; i < n; i += stride) {
    if constexpr (kSquaredDiff) {
      const double d = D(a[i]) - D(b[i]);
      acc += d * d;
    } else {
      acc += D(a[i]);
    }
  }
  acc = BlockAllReduce(acc, SumOp{}, 0.0);

  // Publish this block's partial, then count finished blocks; the fence orders the two, so the block
  // that counts last sees every partial.
  __shared__ bool last;
  if (threadIdx.x == 0) {
    scratch.partials[blockIdx.x] = acc;
    __threadfence();
    last = atomicAdd(scratch.counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  double total = 0;
  for (unsigned j = threadIdx.x; j < gridDim.x; j += blockDim.x) total += __ldcg(&scratch.partials[j]);
  total = BlockAllReduce(total, SumOp{}, 0.0);
  if (threadIdx.x == 0) {
    *out = Narrow<O>(total / divisor);
    *scratch.counter = 0;  // ready for the next reduction on this stream
  }
}

/// Sum along the last dim (inner == 1): one warp per row, rows in a grid-stride loop.
template <typename S, typename O>
__global__ void RowSumWarpKernel(const S* x, O* out, int64_t rows, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
    const S* row = x + r * n;
    double acc = 0;
    for (int64_t j = lane; j < n; j += 32) acc += D(row[j]);
    acc = internal::WarpAllReduce(acc, SumOp{});
    if (lane == 0) out[r] = Narrow<O>(acc);
  }
}

/// Sum along the last dim for long rows: one block per row.
template <typename S, typename O>
__global__ void RowSumBlockKernel(const S* x, O* out, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* row = x + r * n;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += D(row[j]);
    acc = BlockAllReduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) out[r] = Narrow<O>(acc);
  }
}

/// x as [outer, n, inner], out[o, q] = sum_k x[o, k, q] + beta * out[o, q] (e.g. a bias gradient: the
/// sum over the batch, accumulated with beta 1; beta 0 does not read out). A block is 32 columns x 8
/// row-lanes: a warp reads 32 neighbouring columns of one row (coalesced), the 8 warps split the rows,
/// and shared memory adds their 8 partial sums in a fixed order. The beta term is added in double, as
/// on the CPU, and the result rounded once.
constexpr int kColLanes = 8;
template <typename S, typename O>
__global__ void ColumnSumKernel(const S* x, O* out, int64_t outer, int64_t n, int64_t inner, double beta) {
  __shared__ double partial[kColLanes][32];
  const int64_t q = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    double acc = 0;
    if (q < inner) {
      const S* slab = x + o * n * inner + q;
      for (int64_t k = threadIdx.y; k < n; k += kColLanes) acc += D(slab[k * inner]);
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && q < inner) {
      double total = 0;
      for (int l = 0; l < kColLanes; ++l) total += partial[l][threadIdx.x];
      O* dst = out + o * inner + q;
      const double old = beta == 0.0 ? 0.0 : internal::Mul(beta, D(*dst));
      *dst = Narrow<O>(internal::Add(total, old));
    }
    __syncthreads();  // `partial` is reused by the next o
  }
}

/// Index of the largest element of each row of [rows, cols], one warp per row. Same answer as the CPU
/// loop: the first index among equals, and a NaN counts as larger than everything (first NaN wins).
template <typename T>
__device__ __forceinline__ bool Better(T v, int64_t i, T best, int64_t best_i) {
  const bool v_nan = isnan(v), best_nan = isnan(best);
  if (v_nan || best_nan) return v_nan && (!best_nan || i < best_i);
  return v > best || (v == best && i < best_i);
}

template <typename S>
__global__ void ArgMaxKernel(const S* x, int64_t* out, int64_t rows, int64_t cols) {
  using T = Compute<S>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
    const S* row = x + r * cols;
    T best = -INFINITY;
    int64_t best_i = INT64_MAX;
    for (int64_t j = lane; j < cols; j += 32) {
      const T v = Widen(row[j]);
      if (Better(v, j, best, best_i)) {
        best = v;
        best_i = j;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const T v = __shfl_xor_sync(0xffffffffu, best, offset);
      const int64_t i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (Better(v, i, best, best_i)) {
        best = v;
        best_i = i;
      }
    }
    if (lane == 0) out[r] = best_i;
  }
}

// --- Launchers -----------------------------------------------------------------------------------------

template <typename S, bool kSquaredDiff, typename O>
void LaunchReduceAll(const S* a, const S* b, int64_t n, double divisor, Tensor& out) {
  LaunchScope scope(out);
  const bool vector = internal::Aligned16(a) && (!kSquaredDiff || internal::Aligned16(b));
  const int64_t packs = vector ? n / Pack<S>::kSize : 0;
  const int64_t scalars = n - packs * Pack<S>::kSize;
  auto kernel = ReduceAllKernel<S, kSquaredDiff, O>;
  const int grid = internal::GridFor(kernel, packs > scalars ? packs : scalars, scope.device());
  const ReduceScratch scratch = internal::GetReduceScratch(scope.device(), scope.stream(), grid);
  kernel<<<grid, kThreads, 0, scope.stream()>>>(a, b, n, packs, divisor, DataAs<O>(out), scratch);
  CUDA_LAUNCH_CHECK();
}

/// out[o, q] = sum_k x[o, k, q] + beta * out[o, q], with the kernel that suits the shape.
template <typename S, typename O>
void LaunchSumDim(const LaunchScope& scope, const S* in, O* o, int64_t outer, int64_t n, int64_t inner, float beta) {
  if (inner == 1 && beta == 0.f && n >= 4096) {
    auto kernel = RowSumBlockKernel<S, O>;
    const int grid = internal::GridFor(kernel, outer * kThreads, scope.device());
    kernel<<<grid, kThreads, 0, scope.stream()>>>(in, o, outer, n);
  } else if (inner == 1 && beta == 0.f) {
    auto kernel = RowSumWarpKernel<S, O>;
    const int grid = internal::GridFor(kernel, outer * 32, scope.device());
    kernel<<<grid, kThreads, 0, scope.stream()>>>(in, o, outer, n);
  } else {
    const dim3 block(32, kColLanes);
    const dim3 grid(static_cast<unsigned>((inner + 31) / 32), static_cast<unsigned>(outer < 65535 ? outer : 65535));
    ColumnSumKernel<S, O><<<grid, block, 0, scope.stream()>>>(in, o, outer, n, inner, static_cast<double>(beta));
  }
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void SumAll(const Tensor& x, Tensor& out) {
  internal::DispatchFloatOrBf16(x.dtype(), "SumAll", [&](auto tag) {
    using S = decltype(tag);
    internal::DispatchOut<S>(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      LaunchReduceAll<S, false, O>(DataAs<const S>(x), static_cast<const S*>(nullptr), x.numel(), 1.0, out);
    });
  });
}

void MseLoss(const Tensor& a, const Tensor& b, Tensor& out) {
  internal::DispatchFloatOrBf16(a.dtype(), "MseLoss", [&](auto tag) {
    using S = decltype(tag);
    internal::DispatchOut<S>(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      LaunchReduceAll<S, true, O>(DataAs<const S>(a), DataAs<const S>(b), a.numel(), static_cast<double>(a.numel()),
                                  out);
    });
  });
}

void SumDim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  if (out.numel() == 0) return;
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(x.dtype(), "SumDim", [&](auto tag) {
    using S = decltype(tag);
    internal::DispatchOut<S>(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      LaunchSumDim(scope, DataAs<const S>(x), DataAs<O>(out), outer, n, inner, 0.f);
    });
  });
}

void SumRows(const Tensor& x, float beta, Tensor& out) {
  if (out.numel() == 0) return;
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(x.dtype(), "SumRows", [&](auto tag) {
    using S = decltype(tag);
    internal::DispatchOut<S>(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      LaunchSumDim(scope, DataAs<const S>(x), DataAs<O>(out), 1, x.size(0), x.size(1), beta);
    });
  });
}

void ArgMax(const Tensor& x, Tensor& out) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(x.dtype(), "ArgMax", [&](auto tag) {
    using S = decltype(tag);
    auto kernel = ArgMaxKernel<S>;
    const int grid = internal::GridFor(kernel, rows * 32, scope.device());
    kernel<<<grid, kThreads, 0, scope.stream()>>>(DataAs<const S>(x), out.data<int64_t>(), rows, cols);
    CUDA_LAUNCH_CHECK();
  });
}

}  // namespace tinyddp::cuda
