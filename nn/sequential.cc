// nn::Sequential (nn/sequential.h).
#include "nn/sequential.h"

#include "absl/strings/str_cat.h"
#include "tensor/internal/check.h"

namespace tinyddp::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) Append(m);
}

Sequential& Sequential::Append(std::shared_ptr<Module> module) {
  RegisterModule(absl::StrCat(Children().size()), std::move(module));
  return *this;
}

Variable Sequential::Forward(const Variable& x) {
  Variable y = x;
  for (const auto& [name, child] : Children()) y = child->Forward(y);
  return y;
}

std::string Sequential::ToString() const {
  std::string s = "Sequential(\n";
  for (const auto& [name, child] : Children()) absl::StrAppend(&s, "  (", name, "): ", child->ToString(), "\n");
  return s + ")";
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  TINYDDP_CHECK_OP(i < size(), "Sequential::operator[]", "index ", i, " out of range for ", size(), " children");
  return Children()[i].second;
}

}  // namespace tinyddp::nn
