// nn::Sequential (nn/sequential.h).
#include "nn/sequential.h"

#include "absl/strings/str_cat.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "base/check.h"

namespace tinyddp::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) Append(m);
}

Sequential& Sequential::Append(std::shared_ptr<Module> module) {
  RegisterModule(absl::StrCat(Children().size()), std::move(module));
  return *this;
}

Variable Sequential::Forward(const Variable& x) {
  const auto& children = Children();
  Variable y = x;
  for (size_t i = 0; i < children.size(); ++i) {
    // Linear then ReLU: one GEMM whose epilogue adds the bias and clamps at 0, so the pre-activation is
    // never written to memory and read back (and the graph has one node fewer).
    auto* linear = dynamic_cast<Linear*>(children[i].second.get());
    if (linear != nullptr && i + 1 < children.size() && dynamic_cast<ReLU*>(children[i + 1].second.get())) {
      y = linear->ForwardRelu(y);
      ++i;
      continue;
    }
    y = children[i].second->Forward(y);
  }
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
