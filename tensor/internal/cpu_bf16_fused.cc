// The float32/float64 CPU side of the kernels that mixed precision added to the list (kernel_list.inc):
// LinearRelu and SumRows, which the GPU fuses (a cuBLASLt epilogue; a column sum that can accumulate
// into a gradient buffer), and the *Mixed optimizer steps. The CPU has nothing to gain from fusing,
// so each is its parts in sequence, with the same arithmetic as the GPU kernel.
#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void LinearRelu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  Linear(x, w, bias, out);
  Relu(out, out);  // elementwise, so in place is safe
}

void SumRows(const Tensor& x, float beta, Tensor& out) {
  DispatchFloat(x.dtype(), "SumRows", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.size(0), cols = x.size(1);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    // Columns in blocks of double accumulators on the stack; each block walks the rows in order.
    constexpr int64_t kBlock = 256;
    double acc[kBlock];
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t width = cols - c0 < kBlock ? cols - c0 : kBlock;
      for (int64_t q = 0; q < width; ++q) acc[q] = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = in + r * cols + c0;
        for (int64_t q = 0; q < width; ++q) acc[q] += static_cast<double>(row[q]);
      }
      // out = sum + beta * out in double, rounded once; beta == 0 never reads out (it may hold garbage).
      for (int64_t q = 0; q < width; ++q) {
        const double old = beta == 0.f ? 0.0 : static_cast<double>(beta) * static_cast<double>(o[c0 + q]);
        o[c0 + q] = static_cast<T>(acc[q] + old);
      }
    }
  });
}

// ops.cc calls the *Mixed steps only when a bfloat16 gradient or copy is involved, which the CPU routes
// to cpu_bf16::; these complete the list for the float32-only case.
void SgdStepMixed(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
                  const ops::SgdConfig& config, absl::Span<Tensor> bf16_copies) {
  cpu_bf16::SgdStepMixed(params, grads, momentum_bufs, config, bf16_copies);
}

void AdamStepMixed(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> exp_avgs,
                   absl::Span<Tensor> exp_avg_sqs, const ops::AdamConfig& config, absl::Span<Tensor> bf16_copies) {
  cpu_bf16::AdamStepMixed(params, grads, exp_avgs, exp_avg_sqs, config, bf16_copies);
}

}  // namespace tinyddp::cpu
