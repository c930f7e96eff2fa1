// CPU optimizer steps, following torch.optim's single-tensor code path operation for operation (same
// order, scalars computed in double on the host and rounded to the parameter's type), so a float64
// step here matches PyTorch's to the last bits and a float32 step to rounding.
#include <cmath>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {

void SgdStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
             const ops::SgdConfig& config) {
  for (size_t t = 0; t < params.size(); ++t) {
    DispatchFloat(params[t].dtype(), "SgdStep", [&](auto tag) {
      using T = decltype(tag);
      T* p = params[t].data<T>();
      const T* g = grads[t].data<T>();
      T* buf = config.momentum != 0.0 ? momentum_bufs[t].data<T>() : nullptr;
      const T lr = static_cast<T>(config.lr), wd = static_cast<T>(config.weight_decay);
      const T momentum = static_cast<T>(config.momentum), keep = static_cast<T>(1.0 - config.dampening);
      const bool first = config.first_step, nesterov = config.nesterov, has_wd = config.weight_decay != 0.0;
      const int64_t n = params[t].numel();
      for (int64_t i = 0; i < n; ++i) {
        T d = g[i];
        if (has_wd) d = d + wd * p[i];                        // d_p = grad.add(param, alpha=wd)
        if (buf != nullptr) {
          const T b = first ? d : momentum * buf[i] + keep * d;  // buf.mul_(m).add_(d_p, alpha=1-dampening)
          buf[i] = b;
          d = nesterov ? d + momentum * b : b;
        }
        p[i] = p[i] - lr * d;                                 // param.add_(d_p, alpha=-lr)
      }
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
  const bool has_wd = config.weight_decay != 0.0, decoupled = config.decoupled_weight_decay;
  for (size_t t = 0; t < params.size(); ++t) {
    DispatchFloat(params[t].dtype(), "AdamStep", [&](auto tag) {
      using T = decltype(tag);
      T* p = params[t].data<T>();
      const T* g = grads[t].data<T>();
      T* m = exp_avgs[t].data<T>();
      T* v = exp_avg_sqs[t].data<T>();
      const T decay = static_cast<T>(1.0 - config.lr * config.weight_decay), wd = static_cast<T>(config.weight_decay);
      const T one_minus_b1 = static_cast<T>(1.0 - config.beta1), b2 = static_cast<T>(config.beta2);
      const T one_minus_b2 = static_cast<T>(1.0 - config.beta2);
      const T neg_step = static_cast<T>(-step_size), bc2 = static_cast<T>(bias_correction2_sqrt);
      const T eps = static_cast<T>(config.eps);
      const int64_t n = params[t].numel();
      for (int64_t i = 0; i < n; ++i) {
        T grad = g[i];
        if (has_wd && decoupled) p[i] = p[i] * decay;  // AdamW: param.mul_(1 - lr*wd)
        if (has_wd && !decoupled) grad = grad + wd * p[i];  // Adam: grad = grad.add(param, alpha=wd)
        m[i] = m[i] + one_minus_b1 * (grad - m[i]);     // exp_avg.lerp_(grad, 1 - beta1)
        v[i] = v[i] * b2 + one_minus_b2 * grad * grad;  // exp_avg_sq.mul_(b2).addcmul_(grad, grad, 1 - b2)
        const T denom = std::sqrt(v[i]) / bc2 + eps;    // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
        p[i] = p[i] + neg_step * (m[i] / denom);        // param.addcdiv_(exp_avg, denom, value=-step_size)
      }
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
