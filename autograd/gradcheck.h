// gradcheck: does an op's backward agree with its forward? Compares the gradient computed by Backward
// with central finite differences, in float64 on the CPU, like torch.autograd.gradcheck. Every
// differentiable op in functions.h is checked this way by functions_test.cc.
#ifndef TINYDDP_AUTOGRAD_GRADCHECK_H_
#define TINYDDP_AUTOGRAD_GRADCHECK_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "autograd/variable.h"

namespace tinyddp::autograd {

struct GradCheckOptions {
  double eps = 1e-6;   // finite-difference step
  double rtol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|, element by element
  double atol = 1e-7;
  uint64_t seed = 0x5eed;  // for the random output weights below
};

using GradCheckFn = std::function<Variable(const std::vector<Variable>& inputs)>;

/// Checks the gradient of `f` with respect to every input that requires grad. f may return any shape:
/// the check differentiates L = sum(f(inputs) * w) for fixed random weights w (Backward with seed w),
/// so every output element contributes. Each input element x_k is perturbed in place, and
///   numeric_k = (L(x_k + eps) - L(x_k - eps)) / (2 eps)
/// is compared with the analytic gradient. The inputs' data end unchanged and their grads as before.
/// Preconditions: inputs requiring grad are float64 CPU leaves; f is deterministic and, near the
/// inputs, smooth (keep ReLU inputs away from 0). Returns OK, or InvalidArgument naming the first input
/// and element that disagree with both values, or a misuse (non-float64 input, output without grad).
absl::Status GradCheck(const GradCheckFn& f, const std::vector<Variable>& inputs,
                       const GradCheckOptions& options = {});

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_GRADCHECK_H_
