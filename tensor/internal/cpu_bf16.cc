// bfloat16 on the CPU: the cpu_bf16:: implementation of the whole kernel list (kernel_list.inc), which
// ops.cc calls for any CPU op that involves a bfloat16 tensor. It is here for correctness, for tests and
// CI; speed is secondary (a CPU training run uses float32).
//
// Every math kernel does the same three things: widen each bfloat16 input to a float32 copy (exact: a
// bfloat16 is the top half of a float32), run the float32 CPU kernel (cpu::), and round the float32
// result into the bfloat16 output to nearest even (BFloat16 in tensor/dtype.h). That is the GPU's
// definition too: its bfloat16 kernels compute in float32 and round once as they store, and its GEMMs
// accumulate in float32. So an elementwise op gives the same bits here and on the GPU, and a GEMM or a
// sum differs only where float32 accumulation order does. Outputs that ops.h makes float32 (a float32
// weight gradient, a loss) are written by the float32 kernel directly, never rounded.
//
// Unlike cpu::, these allocate: the float32 copies live for one call.
#include <vector>

#include "tensor/internal/kernels.h"

namespace tinyddp::cpu_bf16 {
namespace {

/// t as float32: t itself unless it is bfloat16, then a widened copy (undefined stays undefined).
Tensor Wide(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::kBFloat16) return t;
  Tensor wide = Tensor::Empty(t.shape(), DType::kFloat32);
  cpu::Cast(t, 1.0, wide);
  return wide;
}

/// Where the float32 kernel writes `out`: out itself unless it is bfloat16, then a float32 buffer (with
/// out's values when the kernel reads them, `load`) that Round() rounds into out.
class WideOut {
 public:
  WideOut(Tensor& out, bool load) : out_(out) {
    if (out.dtype() != DType::kBFloat16) {
      wide_ = out;
    } else {
      wide_ = load ? Wide(out) : Tensor::Empty(out.shape(), DType::kFloat32);
    }
  }
  Tensor& get() { return wide_; }
  /// Stores the result: a no-op when the kernel wrote out itself.
  void Round() {
    if (out_.dtype() == DType::kBFloat16) cpu::Cast(wide_, 1.0, out_);
  }

 private:
  Tensor& out_;
  Tensor wide_;
};

std::vector<Tensor> WideAll(absl::Span<const Tensor> list) {
  std::vector<Tensor> wide;
  wide.reserve(list.size());
  for (const Tensor& t : list) wide.push_back(Wide(t));
  return wide;
}

}  // namespace

// --- Matrix products: float32 accumulation, one rounding of the result ---------------------------------

void MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta, Tensor& out) {
  WideOut o(out, /*load=*/beta != 0.f);
  cpu::MatMul(Wide(a), Wide(b), trans_a, trans_b, alpha, beta, o.get());
  o.Round();
}

void Linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  WideOut o(out, false);
  cpu::Linear(Wide(x), Wide(w), Wide(bias), o.get());
  o.Round();
}

void LinearRelu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  WideOut o(out, false);
  cpu::LinearRelu(Wide(x), Wide(w), Wide(bias), o.get());
  o.Round();
}

// --- Elementwise: computed in float32, rounded per element ---------------------------------------------

void BinaryOp(BinaryKind op, const Tensor& a, const Tensor& b, Tensor& out) {
  WideOut o(out, false);
  cpu::BinaryOp(op, Wide(a), Wide(b), o.get());
  o.Round();
}

void Axpby(double alpha, const Tensor& a, double beta, const Tensor& b, Tensor& out) {
  WideOut o(out, false);  // out may alias a: a is widened before o is written
  cpu::Axpby(alpha, Wide(a), beta, Wide(b), o.get());
  o.Round();
}

void AddRowVector(const Tensor& x, const Tensor& row, Tensor& out) {
  WideOut o(out, false);
  cpu::AddRowVector(Wide(x), Wide(row), o.get());
  o.Round();
}

void Relu(const Tensor& x, Tensor& out) {
  WideOut o(out, false);
  cpu::Relu(Wide(x), o.get());
  o.Round();
}

void ReluBackward(const Tensor& grad, const Tensor& y, Tensor& out) {
  WideOut o(out, false);
  cpu::ReluBackward(Wide(grad), Wide(y), o.get());
  o.Round();
}

void Gelu(const Tensor& x, Tensor& out) {
  WideOut o(out, false);
  cpu::Gelu(Wide(x), o.get());
  o.Round();
}

void GeluBackward(const Tensor& grad, const Tensor& x, Tensor& out) {
  WideOut o(out, false);
  cpu::GeluBackward(Wide(grad), Wide(x), o.get());
  o.Round();
}

// --- Reductions and losses: the float32 kernels accumulate in double; out may be float32 -----------------

void SumAll(const Tensor& x, Tensor& out) {
  WideOut o(out, false);
  cpu::SumAll(Wide(x), o.get());
  o.Round();
}

void SumDim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  WideOut o(out, false);
  cpu::SumDim(Wide(x), outer, n, inner, o.get());
  o.Round();
}

void SumRows(const Tensor& x, float beta, Tensor& out) {
  WideOut o(out, /*load=*/beta != 0.f);
  cpu::SumRows(Wide(x), beta, o.get());
  o.Round();
}

void ArgMax(const Tensor& x, Tensor& out) { cpu::ArgMax(Wide(x), out); }

void LogSoftmax(const Tensor& x, Tensor& out) {
  WideOut o(out, false);
  cpu::LogSoftmax(Wide(x), o.get());
  o.Round();
}

void CrossEntropy(const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& softmax) {
  WideOut l(loss, false), p(softmax, false);  // float32 both, from ops.cc
  cpu::CrossEntropy(Wide(logits), labels, l.get(), p.get());
  l.Round();
  p.Round();
}

void CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss, Tensor& out) {
  WideOut o(out, false);
  cpu::CrossEntropyBackward(Wide(softmax), labels, Wide(grad_loss), o.get());
  o.Round();
}

void MseLoss(const Tensor& a, const Tensor& b, Tensor& out) {
  WideOut o(out, false);
  cpu::MseLoss(Wide(a), Wide(b), o.get());
  o.Round();
}

// --- Data movement: the CPU kernels already handle every dtype -------------------------------------------

void Fill(Tensor& out, double value) { cpu::Fill(out, value); }
void IndexSelectRows(const Tensor& x, const Tensor& indices, Tensor& out) { cpu::IndexSelectRows(x, indices, out); }
void Cast(const Tensor& x, double scale, Tensor& out) { cpu::Cast(x, scale, out); }
void Copy(const Tensor& src, Tensor& out) { cpu::Copy(src, out); }
void UniformInit(Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  cpu::UniformInit(out, low, high, seed, offset);
}
void NormalInit(Tensor& out, double mean, double stddev, uint64_t seed, uint64_t offset) {
  cpu::NormalInit(out, mean, stddev, seed, offset);
}

// --- Optimizer steps: float32 state; bfloat16 grads widened; copies rounded from the new params ----------
// The float32 update is the float32 kernel's, bit for bit (widening a gradient is exact), and each copy
// is then cast from its parameter: the relation bf16_copy == round(p_new) the GPU's fused pass keeps too.

void SgdStepMixed(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
                  const ops::SgdConfig& config, absl::Span<Tensor> bf16_copies) {
  const std::vector<Tensor> wide_grads = WideAll(grads);
  cpu::SgdStep(params, wide_grads, momentum_bufs, config);
  for (size_t i = 0; i < bf16_copies.size(); ++i) cpu::Cast(params[i], 1.0, bf16_copies[i]);
}

void AdamStepMixed(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> exp_avgs,
                   absl::Span<Tensor> exp_avg_sqs, const ops::AdamConfig& config, absl::Span<Tensor> bf16_copies) {
  const std::vector<Tensor> wide_grads = WideAll(grads);
  cpu::AdamStep(params, wide_grads, exp_avgs, exp_avg_sqs, config);
  for (size_t i = 0; i < bf16_copies.size(); ++i) cpu::Cast(params[i], 1.0, bf16_copies[i]);
}

// ops.cc sends every step with bfloat16 gradients to the *Mixed kernels; these complete the list.
void SgdStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
             const ops::SgdConfig& config) {
  SgdStepMixed(params, grads, momentum_bufs, config, {});
}

void AdamStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> exp_avgs,
              absl::Span<Tensor> exp_avg_sqs, const ops::AdamConfig& config) {
  AdamStepMixed(params, grads, exp_avgs, exp_avg_sqs, config, {});
}

}  // namespace tinyddp::cpu_bf16
