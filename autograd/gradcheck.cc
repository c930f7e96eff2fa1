// gradcheck (autograd/gradcheck.h): analytic gradients from Backward against central differences.
#include "autograd/gradcheck.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"

namespace tinyddp::autograd {
namespace {

// L = sum(y * w), on the host (all gradcheck tensors live on the CPU in float64).
double WeightedSum(const Tensor& y, const std::vector<double>& w) {
  const double* p = y.data<double>();
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += p[i] * w[i];
  return sum;
}

}  // namespace

absl::Status GradCheck(const GradCheckFn& f, const std::vector<Variable>& inputs, const GradCheckOptions& options) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable& x = inputs[i];
    if (!x.requires_grad()) continue;
    if (!x.is_leaf() || x.dtype() != DType::kFloat64 || !x.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat("GradCheck: input ", i, " must be a float64 CPU leaf, got ",
                                                     DTypeName(x.dtype()), " on ", x.device().ToString(),
                                                     x.is_leaf() ? "" : " (not a leaf)"));
    }
  }

  // The analytic gradients: one Backward with a random seed. Earlier grads are set aside and restored.
  std::vector<Tensor> saved_grads;
  for (const Variable& x : inputs) {
    saved_grads.push_back(x.grad());
    if (x.requires_grad()) x.set_grad(Tensor());
  }
  const Variable y = f(inputs);
  if (!y.requires_grad() || y.dtype() != DType::kFloat64) {
    return absl::InvalidArgumentError(absl::StrCat("GradCheck: the function's output must be float64 and require grad, "
                                                   "got ", DTypeName(y.dtype()),
                                                   y.requires_grad() ? "" : " without grad"));
  }
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> w(y.numel());
  for (double& v : w) v = uniform(rng);
  Backward(y, Tensor::FromVector(w, y.shape()));

  absl::Status status;
  NoGradGuard no_grad;  // the numeric side only evaluates f
  for (size_t i = 0; i < inputs.size() && status.ok(); ++i) {
    const Variable& x = inputs[i];
    if (!x.requires_grad()) continue;
    if (!x.grad().defined()) {
      status = absl::InvalidArgumentError(absl::StrCat("GradCheck: input ", i, " requires grad but Backward gave it no "
                                                       "gradient (does the output depend on it?)"));
      break;
    }
    const std::vector<double> analytic = x.grad().ToVector<double>();
    double* data = x.data().data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      const double original = data[k];
      data[k] = original + options.eps;
      const double plus = WeightedSum(f(inputs).data(), w);
      data[k] = original - options.eps;
      const double minus = WeightedSum(f(inputs).data(), w);
      data[k] = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      if (!(std::abs(analytic[k] - numeric) <= options.atol + options.rtol * std::abs(numeric))) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "GradCheck: input ", i, " ", ShapeToString(x.shape()), ", element ", k, ": analytic gradient ",
            analytic[k], " but finite differences give ", numeric, " (|diff| ", std::abs(analytic[k] - numeric),
            " > atol ", options.atol, " + rtol ", options.rtol, " * |numeric|)"));
        break;
      }
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].requires_grad()) inputs[i].set_grad(saved_grads[i]);
  }
  return status;
}

}  // namespace tinyddp::autograd
