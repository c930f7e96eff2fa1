// CPU reductions: sum of everything, sum along one dim, argmax along the last dim.
//
// Sums accumulate in double whatever the element type: a float32 running sum over a million elements
// loses digits, and the gradient of a bias is such a sum. The loops keep independent accumulators
// (eight lanes across a row, or one per output column) so the compiler can vectorise them without
// being allowed to reassociate floating-point additions.
#include <cmath>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void SumAll(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "SumAll", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const int64_t n = x.numel();
    constexpr int kLanes = 8;
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(in[i + l]);
    }
    double total = 0;
    for (; i < n; ++i) total += static_cast<double>(in[i]);
    for (int l = 0; l < kLanes; ++l) total += lane[l];
    *out.data<T>() = static_cast<T>(total);
  });
}

void SumDim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  DispatchFloat(x.dtype(), "SumDim", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    // x is [outer, n, inner]; out[p, q] = sum_k x[p, k, q]. Columns go in blocks whose double
    // accumulators live on the stack, so any `inner` works without allocating.
    constexpr int64_t kBlock = 256;
    double acc[kBlock];
    for (int64_t p = 0; p < outer; ++p) {
      const T* slab = in + p * n * inner;
      for (int64_t q0 = 0; q0 < inner; q0 += kBlock) {
        const int64_t width = inner - q0 < kBlock ? inner - q0 : kBlock;
        if (width == 1) {  // summing along the last dim: one long row, use SumAll's lanes
          double lane[8] = {}, total = 0;
          int64_t k = 0;
          for (; k + 8 <= n; k += 8) {
            for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(slab[(k + l) * inner + q0]);
          }
          for (; k < n; ++k) total += static_cast<double>(slab[k * inner + q0]);
          for (int l = 0; l < 8; ++l) total += lane[l];
          o[p * inner + q0] = static_cast<T>(total);
          continue;
        }
        for (int64_t q = 0; q < width; ++q) acc[q] = 0;
        for (int64_t k = 0; k < n; ++k) {
          const T* row = slab + k * inner + q0;
          for (int64_t q = 0; q < width; ++q) acc[q] += static_cast<double>(row[q]);
        }
        for (int64_t q = 0; q < width; ++q) o[p * inner + q0 + q] = static_cast<T>(acc[q]);
      }
    }
  });
}

void ArgMax(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "ArgMax", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.size(0), cols = x.size(1);
    const T* in = x.data<T>();
    int64_t* o = out.data<int64_t>();
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = in + i * cols;
      int64_t best = 0;
      for (int64_t j = 1; j < cols; ++j) {
        // Strictly greater keeps the first index on ties; a NaN counts as the largest, as in torch.argmax.
        if (std::isnan(row[best])) break;
        if (row[j] > row[best] || std::isnan(row[j])) best = j;
      }
      o[i] = best;
    }
  });
}

}  // namespace tinyddp::cpu
