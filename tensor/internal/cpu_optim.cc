// CPU optimizer steps, following torch.optim's single-tensor code path operation for operation (same
// order, scalars computed in double on the host and rounded to the parameter's type), so a float64
// step here matches PyTorch's to the last bits and a float32 step to rounding. The per-element loops are
// in tensor/internal/cpu_isa_optim.cc, built for each instruction-set variant; here the host scalars are
// computed once per step and each tensor is handed over as pointers.
#include <cmath>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/cpu_isa_kernels.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void SgdStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
             const ops::SgdConfig& config) {
  for (size_t t = 0; t < params.size(); ++t) {
    DispatchFloat(params[t].dtype(), "SgdStep", [&](auto tag) {
      using T = decltype(tag);
      SgdScalars<T> s;
      s.lr = static_cast<T>(config.lr);
      s.weight_decay = static_cast<T>(config.weight_decay);
      s.momentum = static_cast<T>(config.momentum);
      s.keep = static_cast<T>(1.0 - config.dampening);
      s.has_weight_decay = config.weight_decay != 0.0;
      s.first_step = config.first_step;
      s.nesterov = config.nesterov;
      T* buf = config.momentum != 0.0 ? momentum_bufs[t].data<T>() : nullptr;
      ActiveIsaKernels<T>().sgd_step(params[t].data<T>(), grads[t].data<T>(), buf, params[t].numel(), s);
    });
  }
}

void AdamStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> exp_avgs,
              absl::Span<Tensor> exp_avg_sqs, const ops::AdamConfig& config) {
  // Host scalars of this step, as torch.optim.adam computes them.
  const double step = static_cast<double>(config.step);
  const double bias_correction1 = 1.0 - std::pow(config.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(config.beta2, step);
  const double step_size = config.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t t = 0; t < params.size(); ++t) {
    DispatchFloat(params[t].dtype(), "AdamStep", [&](auto tag) {
      using T = decltype(tag);
      AdamScalars<T> s;
      s.decay = static_cast<T>(1.0 - config.lr * config.weight_decay);
      s.weight_decay = static_cast<T>(config.weight_decay);
      s.one_minus_beta1 = static_cast<T>(1.0 - config.beta1);
      s.beta2 = static_cast<T>(config.beta2);
      s.one_minus_beta2 = static_cast<T>(1.0 - config.beta2);
      s.neg_step_size = static_cast<T>(-step_size);
      s.bias_correction2_sqrt = static_cast<T>(bias_correction2_sqrt);
      s.eps = static_cast<T>(config.eps);
      s.has_weight_decay = config.weight_decay != 0.0;
      s.decoupled = config.decoupled_weight_decay;
      ActiveIsaKernels<T>().adam_step(params[t].data<T>(), grads[t].data<T>(), exp_avgs[t].data<T>(),
                                      exp_avg_sqs[t].data<T>(), params[t].numel(), s);
    });
  }
}

void LookupAndAdvance(const Tensor& table, Tensor& cursor, Tensor& out) {
  int64_t& at = *cursor.data<int64_t>();
  const int64_t last = table.numel() - 1;
  *out.data<double>() = table.data<double>()[at < 0 ? 0 : (at < last ? at : last)];
  ++at;
}

}  // namespace tinyddp::cpu
