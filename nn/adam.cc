// nn::Adam and nn::AdamW (nn/adam.h).
#include "nn/adam.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::nn {

Adam::Adam(std::vector<Variable> params, const AdamOptions& options) : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Variable> params, const AdamOptions& options, bool decoupled_weight_decay, const char* name)
    : Optimizer(std::move(params), options.lr, name),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay),
      exp_avgs_(params_.size()),
      exp_avg_sqs_(params_.size()),
      steps_(params_.size(), 0) {
  TINYDDP_CHECK_OP(options.eps >= 0 && options.weight_decay >= 0, name, "eps (", options.eps, ") and weight_decay (",
                   options.weight_decay, ") must be >= 0");
  TINYDDP_CHECK_OP(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, name,
                   "betas must be in [0, 1), got (", options.beta1, ", ", options.beta2, ")");
}

AdamW::AdamW(std::vector<Variable> params, const AdamWOptions& options) : Adam(std::move(params), options, true, "AdamW") {}

void Adam::UseDeviceLr(const Tensor& lr) {
  Optimizer::UseDeviceLr(lr);
  if (!lr.defined()) {
    // Back to host steps: the counts the device kept become the host's.
    if (device_step_.defined()) {
      const int64_t steps = static_cast<int64_t>(device_step_.Item());
      for (int64_t& s : steps_) s = steps;
    }
    device_step_ = one_ = Tensor();
    return;
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    TINYDDP_CHECK_OP(steps_[i] == steps_[0], name_, "a device learning rate keeps one step count for all "
                     "parameters on the device, but parameter 0 has taken ", steps_[0], " steps and parameter ", i,
                     " ('", params_[i].name(), "') ", steps_[i], "; hint: call UseDeviceLr before the first Step");
  }
  device_step_ = Tensor::Full({1}, static_cast<double>(steps_.empty() ? 0 : steps_[0]), DType::kFloat64, lr.device());
  one_ = Tensor::Full({1}, 1.0, DType::kFloat64, lr.device());
}

std::string Adam::WhyStepNotCapturable() const {
  if (device_step_.defined()) return "";
  return absl::StrCat(name_, " passes its step count (the bias corrections) to its kernel by value, so a recorded "
                      "step would repeat one step number; give it a device learning rate (UseDeviceLr, "
                      "nn/device_lr.h), which keeps the count on the device");
}

int64_t Adam::step(size_t i) const {
  return device_step_.defined() ? static_cast<int64_t>(device_step_.Item()) : steps_.at(i);
}

void Adam::Step() {
  const std::vector<size_t>& indices = ParamsWithGrad();
  if (device_step_.defined()) {
    TINYDDP_CHECK_OP(indices.size() == params_.size(), name_, "with a device learning rate every parameter steps "
                     "together (one step count on the device), but only ", indices.size(), " of ", params_.size(),
                     " parameters have a gradient; hint: make every parameter take part in the loss");
    ops::AddInto(device_step_, one_);  // t += 1 on the device, before the update reads it
  }
  for (size_t i : indices) {
    if (!exp_avgs_[i].defined()) {  // first step of this parameter: zero moments
      const Tensor& p = params_[i].data();
      exp_avgs_[i] = Tensor::Empty(p.shape(), p.dtype(), p.device());
      exp_avg_sqs_[i] = Tensor::Empty(p.shape(), p.dtype(), p.device());
      ops::Fill(exp_avgs_[i], 0.0);
      ops::Fill(exp_avg_sqs_[i], 0.0);
    }
    ++steps_[i];
  }
  ops::AdamConfig config;
  config.lr = lr_;
  config.beta1 = options_.beta1;
  config.beta2 = options_.beta2;
  config.eps = options_.eps;
  config.weight_decay = options_.weight_decay;
  config.decoupled_weight_decay = decoupled_weight_decay_;
  config.lr_tensor = device_lr_;      // both undefined unless UseDeviceLr: then the kernels read them
  config.step_tensor = device_step_;
  // Bias correction depends on each parameter's own step count; one fused call per distinct count and
  // per "has a compute copy or not" (mixed precision): one call in all, unless some parameters skipped
  // steps without a gradient or only some have copies.
  pending_.assign(indices.begin(), indices.end());
  while (!pending_.empty()) {
    config.step = steps_[pending_.front()];
    const bool with_copy = compute_copies_[pending_.front()].defined();
    step_params_.clear();
    step_grads_.clear();
    step_exp_avgs_.clear();
    step_exp_avg_sqs_.clear();
    step_copies_.clear();
    size_t kept = 0;
    for (size_t i : pending_) {
      if (steps_[i] != config.step || compute_copies_[i].defined() != with_copy) {
        pending_[kept++] = i;
        continue;
      }
      step_params_.push_back(params_[i].data());
      step_grads_.push_back(params_[i].grad());
      step_exp_avgs_.push_back(exp_avgs_[i]);
      step_exp_avg_sqs_.push_back(exp_avg_sqs_[i]);
      if (with_copy) step_copies_.push_back(compute_copies_[i]);
    }
    pending_.resize(kept);
    ops::AdamStep(absl::MakeSpan(step_params_), step_grads_, absl::MakeSpan(step_exp_avgs_),
                  absl::MakeSpan(step_exp_avg_sqs_), config, absl::MakeSpan(step_copies_));
  }
}

TensorMap Adam::StateTensors() const {
  TensorMap state;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avgs_[i].defined()) continue;
    state[absl::StrCat("state.", i, ".step")] = Tensor::Full({}, static_cast<double>(step(i)), DType::kFloat32);
    state[absl::StrCat("state.", i, ".exp_avg")] = exp_avgs_[i];
    state[absl::StrCat("state.", i, ".exp_avg_sq")] = exp_avg_sqs_[i];
  }
  return state;
}

absl::Status Adam::LoadStateTensors(const TensorMap& state) {
  // Validate everything first, so a bad file changes nothing.
  std::vector<Tensor> avgs(params_.size()), avg_sqs(params_.size());
  std::vector<int64_t> steps(params_.size(), -1);
  for (const auto& [name, t] : state) {
    size_t i;
    std::string field;
    RETURN_IF_ERROR(ParseStateName(name, &i, &field));
    if (field == "step") {
      const bool scalar = t.numel() == 1 && IsFloatingPoint(t.dtype()) && t.device().is_cpu();
      const double v = scalar ? t.Item() : -1.0;
      if (!scalar || v < 1 || v != std::floor(v)) {
        return absl::InvalidArgumentError(absl::StrCat(name_, " state: '", name,
                                                       "' must be a CPU floating-point scalar holding a step >= 1"));
      }
      steps[i] = static_cast<int64_t>(v);
    } else if (field == "exp_avg" || field == "exp_avg_sq") {
      RETURN_IF_ERROR(CheckLike(name, t, i));
      (field == "exp_avg" ? avgs : avg_sqs)[i] = t;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(name_, " state: unknown field in '", name, "'"));
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const int present = (steps[i] >= 0) + avgs[i].defined() + avg_sqs[i].defined();
    if (present != 0 && present != 3) {
      return absl::InvalidArgumentError(absl::StrCat(name_, " state: parameter ", i,
                                                     " needs all of step, exp_avg and exp_avg_sq, or none"));
    }
  }
  if (device_step_.defined()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (std::max<int64_t>(steps[i], 0) != std::max<int64_t>(steps[0], 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, " state: parameter 0 has taken ", std::max<int64_t>(steps[0], 0), " steps and parameter ", i, " ",
            std::max<int64_t>(steps[i], 0), ", but with a device learning rate all parameters share one count"));
      }
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (steps[i] < 0) {
      exp_avgs_[i] = exp_avg_sqs_[i] = Tensor();
      steps_[i] = 0;
      continue;
    }
    const Tensor& p = params_[i].data();
    exp_avgs_[i] = Tensor::Empty(p.shape(), p.dtype(), p.device());
    exp_avg_sqs_[i] = Tensor::Empty(p.shape(), p.dtype(), p.device());
    ops::CopyInto(exp_avgs_[i], avgs[i]);
    ops::CopyInto(exp_avg_sqs_[i], avg_sqs[i]);
    steps_[i] = steps[i];
  }
  if (device_step_.defined()) ops::Fill(device_step_, static_cast<double>(steps_.empty() ? 0 : steps_[0]));
  return absl::OkStatus();
}

}  // namespace tinyddp::nn
