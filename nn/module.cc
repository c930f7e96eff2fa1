// Module (nn/module.h): registration, the recursive walks, and the checks on names.
#include "nn/module.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/variable.h"
#include "tensor/internal/check.h"

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
  for (const Variable& p : Parameters()) p.set_data(p.data().To(device));
}

void Module::ZeroGrad(bool set_to_none) { autograd::ZeroGrad(Parameters(), set_to_none); }

}  // namespace tinyddp::nn
