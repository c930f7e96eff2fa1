// Optimizer steps on one parameter tensor, compiled once per instruction-set variant (see
// cpu_isa_kernels.h). They follow torch.optim's single-tensor code path operation for operation (same
// order, scalars rounded to the parameter's type by the caller, cpu_optim.cc), so a float64 step matches
// PyTorch's to the last bits and a float32 step to rounding. With -ffp-contract=off nothing is fused, so
// the sse2, avx2 and avx512 builds of these loops give bit-identical parameters.
#include <cmath>

#include "tensor/internal/cpu_isa_variant.h"

namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS {

template <typename T>
void SgdStep(T* p, const T* g, T* buf, int64_t n, const SgdScalars<T>& s) {
  // Locals, not s.lr: a store through p (a T*) could otherwise change s's fields as far as the compiler
  // knows, and it would reload them every element instead of vectorising.
  const T lr = s.lr, wd = s.weight_decay, momentum = s.momentum, keep = s.keep;
  const bool has_wd = s.has_weight_decay, first = s.first_step, nesterov = s.nesterov;
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (has_wd) d = d + wd * p[i];  // d_p = grad.add(param, alpha=wd)
    if (buf != nullptr) {
      const T b = first ? d : momentum * buf[i] + keep * d;  // buf.mul_(m).add_(d_p, alpha=1-dampening)
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = p[i] - lr * d;  // param.add_(d_p, alpha=-lr)
  }
}

template <typename T>
void AdamStep(T* p, const T* g, T* m, T* v, int64_t n, const AdamScalars<T>& s) {
  const T decay = s.decay, wd = s.weight_decay, one_minus_b1 = s.one_minus_beta1, b2 = s.beta2;
  const T one_minus_b2 = s.one_minus_beta2, neg_step = s.neg_step_size, bc2 = s.bias_correction2_sqrt;
  const T eps = s.eps;
  const bool has_wd = s.has_weight_decay, decoupled = s.decoupled;
  for (int64_t i = 0; i < n; ++i) {
    T grad = g[i];
    if (has_wd && decoupled) p[i] = p[i] * decay;       // AdamW: param.mul_(1 - lr*wd)
    if (has_wd && !decoupled) grad = grad + wd * p[i];  // Adam: grad = grad.add(param, alpha=wd)
    m[i] = m[i] + one_minus_b1 * (grad - m[i]);         // exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * b2 + one_minus_b2 * grad * grad;      // exp_avg_sq.mul_(b2).addcmul_(grad, grad, 1 - b2)
    const T denom = std::sqrt(v[i]) / bc2 + eps;        // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    p[i] = p[i] + neg_step * (m[i] / denom);            // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

template void SgdStep<float>(float*, const float*, float*, int64_t, const SgdScalars<float>&);
template void SgdStep<double>(double*, const double*, double*, int64_t, const SgdScalars<double>&);
template void AdamStep<float>(float*, const float*, float*, float*, int64_t, const AdamScalars<float>&);
template void AdamStep<double>(double*, const double*, double*, double*, int64_t, const AdamScalars<double>&);

}  // namespace tinyddp::cpu::TINYDDP_CPU_ISA_NS
