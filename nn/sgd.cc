// nn::SGD (nn/sgd.h).
#include "nn/sgd.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::nn {

SGD::SGD(std::vector<Variable> params, const SgdOptions& options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options), momentum_buffers_(params_.size()) {
  TINYDDP_CHECK_OP(options.momentum >= 0 && options.weight_decay >= 0, "SGD", "momentum (", options.momentum,
                   ") and weight_decay (", options.weight_decay, ") must be >= 0");
  TINYDDP_CHECK_OP(!options.nesterov || (options.momentum > 0 && options.dampening == 0), "SGD",
                   "nesterov momentum requires momentum > 0 and dampening == 0 (got momentum ", options.momentum,
                   ", dampening ", options.dampening, "), as in PyTorch");
}

void SGD::Step() {
  const std::vector<size_t>& indices = ParamsWithGrad();
  ops::SgdConfig config;
  config.lr = lr_;
  config.momentum = options_.momentum;
  config.dampening = options_.dampening;
  config.weight_decay = options_.weight_decay;
  config.nesterov = options_.nesterov;
  config.lr_tensor = device_lr_;  // when defined, the kernels read the learning rate there (UseDeviceLr)
  // One fused call per group of parameters that take the same rule: with momentum, those whose buffer
  // exists take the steady-state rule and the others (all of them on the first step) start their buffer
  // from the gradient; under mixed precision, those with a compute copy get it written. Usually one
  // group holds every parameter and the others are empty.
  const bool momentum = options_.momentum != 0;
  for (const bool first_step : {false, true}) {
    if (first_step && !momentum) break;
    for (const bool with_copy : {false, true}) {
      step_params_.clear();
      step_grads_.clear();
      step_buffers_.clear();
      step_copies_.clear();
      for (size_t i : indices) {
        if (momentum && momentum_buffers_[i].defined() == first_step) continue;
        if (compute_copies_[i].defined() != with_copy) continue;
        const Tensor& p = params_[i].data();
        step_params_.push_back(p);
        step_grads_.push_back(params_[i].grad());
        if (with_copy) step_copies_.push_back(compute_copies_[i]);
        if (!momentum) continue;
        if (first_step) momentum_buffers_[i] = Tensor::Empty(p.shape(), p.dtype(), p.device());
        step_buffers_.push_back(momentum_buffers_[i]);
      }
      if (step_params_.empty()) continue;
      config.first_step = first_step;
      ops::SgdStep(absl::MakeSpan(step_params_), step_grads_, absl::MakeSpan(step_buffers_), config,
                   absl::MakeSpan(step_copies_));
    }
  }
}

TensorMap SGD::StateTensors() const {
  TensorMap state;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers_[i].defined()) state[absl::StrCat("state.", i, ".momentum_buffer")] = momentum_buffers_[i];
  }
  return state;
}

absl::Status SGD::LoadStateTensors(const TensorMap& state) {
  std::vector<Tensor> loaded(params_.size());
  for (const auto& [name, t] : state) {
    size_t i;
    std::string field;
    RETURN_IF_ERROR(ParseStateName(name, &i, &field));
    if (field != "momentum_buffer") {
      return absl::InvalidArgumentError(absl::StrCat("SGD state: unknown field in '", name, "'"));
    }
    RETURN_IF_ERROR(CheckLike(name, t, i));
    loaded[i] = t;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!loaded[i].defined()) {
      momentum_buffers_[i] = Tensor();
      continue;
    }
    const Tensor& p = params_[i].data();
    momentum_buffers_[i] = Tensor::Empty(p.shape(), p.dtype(), p.device());
    ops::CopyInto(momentum_buffers_[i], loaded[i]);
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::nn
