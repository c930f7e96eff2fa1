// Module (nn/module.h): registration, the recursive walks, and the checks on names.
#include "nn/module.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/variable.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::nn {

void Module::CheckNewName(const std::string& name) const {
  TINYDDP_CHECK_OP(!name.empty() && !absl::StrContains(name, "."), "Module::Register", "name '", name,
                   "' must be non-empty and contain no '.' (dots separate the levels of a dotted name)");
  bool taken = false;
  for (const auto& p : parameters_) taken = taken || p.first == name;
  for (const auto& c : children_) taken = taken || c.first == name;
  TINYDDP_CHECK_OP(!taken, "Module::Register", "name '", name, "' is already taken in ", ToString());
}

Variable Module::RegisterParameter(const std::string& name, Tensor data) {
  CheckNewName(name);
  Variable p(std::move(data), /*requires_grad=*/true, name);
  parameters_.emplace_back(name, p);
  compute_copies_.emplace_back();
  if (precision_ == Precision::kBFloat16) CastComputeCopy(parameters_.size() - 1);
  return p;
}

void Module::AddChild(const std::string& name, std::shared_ptr<Module> module) {
  TINYDDP_CHECK_OP(module != nullptr, "Module::RegisterModule", "child '", name, "' is null");
  CheckNewName(name);
  // Parameters carry their full dotted name (for messages from autograd and DDP). Registering into a
  // parent later prefixes them again, so the name always starts at the outermost module.
  for (auto& [child_name, p] : module->NamedParameters()) p.set_name(absl::StrCat(name, ".", child_name));
  children_.emplace_back(name, std::move(module));
}

void Module::CollectParameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [name, p] : parameters_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->CollectParameters(absl::StrCat(prefix, name, "."), out);
}

std::vector<std::pair<std::string, Variable>> Module::NamedParameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  CollectParameters("", out);
  return out;
}

std::vector<Variable> Module::Parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : NamedParameters()) out.push_back(p);
  return out;
}

int64_t Module::NumParameters() const {
  int64_t n = 0;
  for (const Variable& p : Parameters()) n += p.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor>> Module::StateDict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : NamedParameters()) out.emplace_back(name, p.data());
  return out;
}

void Module::Train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->Train(on);
}

void Module::To(Device device) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Variable& p = parameters_[i].second;
    p.set_data(p.data().To(device));
    if (compute_copies_[i].defined()) CastComputeCopy(i);  // a new copy, on the new device
  }
  for (const auto& [name, child] : children_) child->To(device);
}

void Module::CastComputeCopy(size_t i) {
  const Variable& p = parameters_[i].second;
  TINYDDP_CHECK_OP(p.dtype() == DType::kFloat32, "Module::SetPrecision", "bf16 mixed precision keeps float32 "
                   "master weights, but parameter '", p.name(), "' is ", DTypeName(p.dtype()),
                   "; hint: build the model in float32");
  Tensor& copy = compute_copies_[i];
  if (!copy.defined() || copy.device() != p.device()) copy = Tensor::Empty(p.shape(), DType::kBFloat16, p.device());
  ops::CastInto(copy, p.data());  // rounds to nearest even, as the optimizer's copies will be
}

void Module::SetComputeCopy(const Variable& param, Tensor copy) {
  TINYDDP_CHECK_OP(ReplaceComputeCopy(param, copy), "Module::SetComputeCopy", "'", param.name(),
                   "' is not a parameter of ", ToString(), " or it has no compute copy; hint: set bf16 precision first");
}

bool Module::ReplaceComputeCopy(const Variable& param, const Tensor& copy) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].second.Is(param)) continue;
    if (!compute_copies_[i].defined()) return false;
    TINYDDP_CHECK_OP(copy.dtype() == DType::kBFloat16 && copy.shape() == param.shape() &&
                         copy.device() == param.device(),
                     "Module::SetComputeCopy", "the compute copy of '", param.name(), "' must be bfloat16 ",
                     ShapeToString(param.shape()), " on ", param.device().ToString(), ", got ",
                     DTypeName(copy.dtype()), " ", ShapeToString(copy.shape()), " on ", copy.device().ToString());
    compute_copies_[i] = copy;
    CastComputeCopy(i);
    return true;
  }
  for (const auto& [name, child] : children_) {
    if (child->ReplaceComputeCopy(param, copy)) return true;
  }
  return false;
}

void Module::SetPrecision(Precision precision) {
  precision_ = precision;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (precision == Precision::kFloat32) {
      compute_copies_[i] = Tensor();
    } else {
      CastComputeCopy(i);
    }
  }
  for (const auto& [name, child] : children_) child->SetPrecision(precision);
}

std::vector<std::pair<Variable, Tensor>> Module::ComputeCopies() const {
  std::vector<std::pair<Variable, Tensor>> out;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (compute_copies_[i].defined()) out.emplace_back(parameters_[i].second, compute_copies_[i]);
  }
  for (const auto& [name, child] : children_) {
    for (auto& entry : child->ComputeCopies()) out.push_back(std::move(entry));
  }
  return out;
}

void Module::RefreshComputeCopies() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (compute_copies_[i].defined()) CastComputeCopy(i);
  }
  for (const auto& [name, child] : children_) child->RefreshComputeCopies();
}

const Tensor& Module::ComputeValue(const Variable& param) const {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].second.Is(param)) continue;
    return compute_copies_[i].defined() ? compute_copies_[i] : param.data();
  }
  TINYDDP_CHECK_OP(false, "Module::ComputeValue", "'", param.name(), "' is not a parameter of ", ToString(),
                   "; hint: a layer asks only for its own parameters");
  return param.data();
}

void Module::ZeroGrad(bool set_to_none) { autograd::ZeroGrad(Parameters(), set_to_none); }

}  // namespace tinyddp::nn
