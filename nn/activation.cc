// Activation modules (nn/activation.h).
#include "nn/activation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "autograd/functions.h"

namespace tinyddp::nn {

Variable ReLU::Forward(const Variable& x) { return autograd::Relu(x); }

Variable GELU::Forward(const Variable& x) { return autograd::Gelu(x); }

std::shared_ptr<Module> MakeActivation(Activation activation) {
  if (activation == Activation::kGELU) return std::make_shared<GELU>();
  return std::make_shared<ReLU>();
}

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "relu") return Activation::kReLU;
  if (lower == "gelu") return Activation::kGELU;
  return absl::InvalidArgumentError(absl::StrCat("unknown activation '", name, "'; expected relu or gelu"));
}

}  // namespace tinyddp::nn
