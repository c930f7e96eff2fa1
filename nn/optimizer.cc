// Optimizer (nn/optimizer.h): what SGD and Adam share.
#include "nn/optimizer.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/check.h"

namespace tinyddp::nn {

Optimizer::Optimizer(std::vector<Variable> params, double lr, const char* name)
    : params_(std::move(params)), compute_copies_(params_.size()), lr_(lr), name_(name) {
  TINYDDP_CHECK_OP(lr >= 0, name_, "learning rate must be >= 0, got ", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    TINYDDP_CHECK_OP(params_[i].defined() && params_[i].is_leaf() && params_[i].requires_grad(), name_,
                     "parameter ", i, " must be a leaf that requires grad; hint: pass module.Parameters()");
  }
  with_grad_.reserve(params_.size());
}

void Optimizer::ZeroGrad(bool set_to_none) { autograd::ZeroGrad(params_, set_to_none); }

void Optimizer::SetComputeCopies(const std::vector<std::pair<Variable, Tensor>>& copies) {
  absl::flat_hash_map<const void*, const Tensor*> by_param;  // a Variable's identity is its shared state
  for (const auto& [param, copy] : copies) by_param[param.state().get()] = &copy;
  for (size_t i = 0; i < params_.size(); ++i) {
    compute_copies_[i] = Tensor();
    const auto it = by_param.find(params_[i].state().get());
    if (it == by_param.end()) continue;  // no copy: stepped as in float32 training
    const Tensor& copy = *it->second;
    const Tensor& p = params_[i].data();
    TINYDDP_CHECK_OP(copy.defined() && copy.dtype() == DType::kBFloat16 && p.dtype() == DType::kFloat32 &&
                         copy.shape() == p.shape() && copy.device() == p.device(),
                     name_, "the compute copy of parameter ", i, " ('", params_[i].name(), "') must be a bfloat16 ",
                     ShapeToString(p.shape()), " tensor on ", p.device().ToString(), " for a float32 parameter; ",
                     "hint: pass Module::ComputeCopies() of a model set to bf16 precision");
    compute_copies_[i] = copy;
  }
}

void Optimizer::set_lr(double lr) {
  TINYDDP_CHECK_OP(lr >= 0, name_, "learning rate must be >= 0, got ", lr);
  lr_ = lr;
}

void Optimizer::UseDeviceLr(const Tensor& lr) {
  if (lr.defined()) {
    const Device device = params_.empty() ? lr.device() : params_[0].device();
    TINYDDP_CHECK_OP(lr.numel() == 1 && lr.dtype() == DType::kFloat64 && lr.device() == device, name_,
                     "the device learning rate must be a one-element float64 tensor on ", device.ToString(),
                     ", got ", DTypeName(lr.dtype()), " ", ShapeToString(lr.shape()), " on ", lr.device().ToString(),
                     "; hint: use DeviceLr::lr() (nn/device_lr.h)");
  }
  device_lr_ = lr;
}

const std::vector<size_t>& Optimizer::ParamsWithGrad() {
  with_grad_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) with_grad_.push_back(i);
  }
  return with_grad_;
}

absl::Status Optimizer::ParseStateName(const std::string& name, size_t* index, std::string* field) const {
  const std::vector<std::string> parts = absl::StrSplit(name, '.');
  uint64_t i = 0;
  if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], &i) || parts[2].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " state: '", name, "' is not of the form state.<parameter index>.<field>"));
  }
  if (i >= params_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, " state: '", name, "' names parameter ", i,
                                                   " but this optimizer has ", params_.size()));
  }
  *index = static_cast<size_t>(i);
  *field = parts[2];
  return absl::OkStatus();
}

absl::Status Optimizer::CheckLike(const std::string& name, const Tensor& t, size_t i) const {
  const Tensor& p = params_[i].data();
  if (t.shape() != p.shape() || t.dtype() != p.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, " state: '", name, "' is ", DTypeName(t.dtype()), " ",
                                                   ShapeToString(t.shape()), " but parameter ", i, " is ",
                                                   DTypeName(p.dtype()), " ", ShapeToString(p.shape())));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::nn
