// CUDA losses: log_softmax, fused softmax + cross-entropy (mean over the batch) and its backward
// (the CPU half is cpu_loss.cc, which explains the max-subtraction that keeps exp from overflowing).
//
// One block per row of logits. The block's threads hold the row in registers (up to kItems values
// each), so the row is read from memory once: a block-wide max (warp shuffles, then shared memory),
// a block-wide sum of exp(x - max), then the outputs. Rows longer than the registers hold are re-read
// (from L1/L2). Cross-entropy also needs the mean of the per-row losses across blocks: as in
// cuda_reduce.cu, each row's loss goes to per-stream scratch and the last block to finish adds them
// in a fixed order, so the loss is deterministic and the whole forward is one launch.
//
// bfloat16 logits are widened as they are loaded and everything is computed in float; cross-entropy then
// writes a float32 softmax and loss (ops.h says why), and the backward can round its float result to a
// bfloat16 gradient as it stores it.
#include <cstdio>

#include "tensor/internal/cuda_common.cuh"
#include "tensor/internal/kernels.h"

namespace tinyddp::cuda {
namespace {

using internal::BlockAllReduce;
using internal::Compute;
using internal::DataAs;
using internal::LaunchScope;
using internal::MaxOp;
using internal::Narrow;
using internal::ReduceScratch;
using internal::SumOp;
using internal::Widen;

constexpr int kItems = 8;  // row values held per thread

__device__ __forceinline__ void CheckLabel(int64_t label, int64_t row, int64_t cols, const char* op) {
  if (label < 0 || label >= cols) {
    printf(
        "tinyddp: %s: label %lld at row %lld is out of range for %lld classes; hint: labels are class "
        "indices in [0, C)\n",
        op, static_cast<long long>(label), static_cast<long long>(row), static_cast<long long>(cols));
    __trap();
  }
}

/// kCrossEntropy = false: out = log_softmax(x). true: out = softmax(x), and *loss = the mean over rows
/// of log(sum_j exp(x_j - m)) + m - x_label (the CPU kernel's formula). x has storage type S, computed
/// in T = Compute<S>; out and loss have storage type O.
template <typename S, typename O, bool kCrossEntropy>
__global__ void __launch_bounds__(1024) SoftmaxRowsKernel(const S* x, int64_t rows, int64_t cols, O* out,
                                                          const int64_t* labels, O* loss, ReduceScratch scratch) {
  using T = Compute<S>;
  const bool in_registers = cols <= static_cast<int64_t>(blockDim.x) * kItems;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* row = x + r * cols;
    O* o = out + r * cols;
    T v[kItems];
    T m = -INFINITY;
    if (in_registers) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        v[k] = j < cols ? Widen(row[j]) : T(-INFINITY);
        m = MaxOp()(m, v[k]);
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = MaxOp()(m, Widen(row[j]));
    }
    m = BlockAllReduce(m, MaxOp{}, T(-INFINITY));

    T sum = 0;
    if (in_registers) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (j < cols) {
          const T e = exp(v[k] - m);
          sum += e;
          if constexpr (kCrossEntropy) v[k] = e;  // kept for the softmax below: one exp per element
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += exp(Widen(row[j]) - m);
    }
    sum = BlockAllReduce(sum, SumOp{}, T(0));

    if constexpr (kCrossEntropy) {
      const T inv = T(1) / sum;
      if (in_registers) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (j < cols) o[j] = Narrow<O>(v[k] * inv);
        }
      } else {
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) o[j] = Narrow<O>(exp(Widen(row[j]) - m) * inv);
      }
      if (threadIdx.x == 0) {
        const int64_t label = labels[r];
        CheckLabel(label, r, cols, "CrossEntropy");
        scratch.partials[r] =
            log(static_cast<double>(sum)) + static_cast<double>(m) - static_cast<double>(Widen(row[label]));
      }
    } else {
      const T log_sum = log(sum);
      if (in_registers) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
          if (j < cols) o[j] = Narrow<O>((v[k] - m) - log_sum);
        }
      } else {
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) o[j] = Narrow<O>((Widen(row[j]) - m) - log_sum);
      }
    }
  }

  if constexpr (kCrossEntropy) {
    // The mean over rows: the last block to finish adds every row's loss, in row order per thread.
    __shared__ bool last;
    if (threadIdx.x == 0) {
      __threadfence();
      last = atomicAdd(scratch.counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    double total = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) total += __ldcg(&scratch.partials[r]);
    total = BlockAllReduce(total, SumOp{}, 0.0);
    if (threadIdx.x == 0) {
      *loss = Narrow<O>(total / static_cast<double>(rows));
      *scratch.counter = 0;
    }
  }
}

/// out = (softmax - onehot(label)) * grad_loss / rows, one warp per row; computed in Compute<S>, stored
/// as O (S, or bfloat16 for the gradient of bfloat16 logits).
template <typename S, typename O>
__global__ void CrossEntropyBackwardKernel(const S* softmax, const int64_t* labels, const S* grad_loss, O* out,
                                           int64_t rows, int64_t cols) {
  using internal::Mul;
  using internal::Sub;
  using T = Compute<S>;
  const T scale = static_cast<T>(static_cast<double>(Widen(*grad_loss)) / static_cast<double>(rows));
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
    const int64_t label = labels[r];
    if (lane == 0) CheckLabel(label, r, cols, "CrossEntropyBackward");
    const S* p = softmax + r * cols;
    O* o = out + r * cols;
    for (int64_t j = lane; j < cols; j += 32) {
      const T pj = Widen(p[j]);
      o[j] = Narrow<O>(j == label ? Mul(Sub(pj, T(1)), scale) : Mul(pj, scale));
    }
  }
}

// Threads per row: enough that the row fits in registers (kItems each), a multiple of 32, at most 1024.
int ThreadsForRow(int64_t cols) {
  int64_t threads = (cols + kItems - 1) / kItems;
  threads = (threads + 31) / 32 * 32;
  return static_cast<int>(threads < 32 ? 32 : threads > 1024 ? 1024 : threads);
}

template <bool kCrossEntropy>
void LaunchSoftmaxRows(const char* op, const Tensor& x, Tensor& out, const Tensor& labels, Tensor* loss) {
  const int64_t rows = x.size(0), cols = x.size(1);
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(x.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    internal::DispatchOut<S>(out.dtype(), [&](auto out_tag) {
      using O = decltype(out_tag);
      auto kernel = SoftmaxRowsKernel<S, O, kCrossEntropy>;
      const int threads = ThreadsForRow(cols);
      const int grid = internal::GridFor(kernel, rows * threads, scope.device(), threads);
      ReduceScratch scratch{nullptr, nullptr};
      if (kCrossEntropy) scratch = internal::GetReduceScratch(scope.device(), scope.stream(), rows);
      kernel<<<grid, threads, 0, scope.stream()>>>(DataAs<const S>(x), rows, cols, DataAs<O>(out),
                                                   kCrossEntropy ? labels.data<int64_t>() : nullptr,
                                                   kCrossEntropy ? DataAs<O>(*loss) : nullptr, scratch);
      CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace

void LogSoftmax(const Tensor& x, Tensor& out) {
  if (x.numel() == 0) return;
  LaunchSoftmaxRows<false>("LogSoftmax", x, out, Tensor(), nullptr);
}

void CrossEntropy(const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& softmax) {
  LaunchSoftmaxRows<true>("CrossEntropy", logits, softmax, labels, &loss);
}

void CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss, Tensor& out) {
  const int64_t rows = softmax.size(0), cols = softmax.size(1);
  LaunchScope scope(out);
  internal::DispatchFloatOrBf16(softmax.dtype(), "CrossEntropyBackward", [&](auto tag) {
    using S = decltype(tag);
    auto launch = [&](auto out_tag) {
      using O = decltype(out_tag);
      auto kernel = CrossEntropyBackwardKernel<S, O>;
      const int grid = internal::GridFor(kernel, rows * 32, scope.device());
      kernel<<<grid, internal::kThreads, 0, scope.stream()>>>(DataAs<const S>(softmax), labels.data<int64_t>(),
                                                              DataAs<const S>(grad_loss), DataAs<O>(out), rows, cols);
      CUDA_LAUNCH_CHECK();
    };
    // out has softmax's dtype, or is the bfloat16 gradient of bfloat16 logits (from a float32 softmax).
    if (out.dtype() == DType::kBFloat16) {
      launch(internal::Bf16{});
    } else {
      launch(S{});
    }
  });
}

}  // namespace tinyddp::cuda
