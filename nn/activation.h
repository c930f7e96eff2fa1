// Activation modules (no parameters): nn::ReLU and nn::GELU (tanh approximation, PyTorch's
// GELU(approximate='tanh')), and the Activation enum the MLP builder takes.
#ifndef TINYDDP_NN_ACTIVATION_H_
#define TINYDDP_NN_ACTIVATION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nn/module.h"

namespace tinyddp::nn {

class ReLU : public Module {
 public:
  Variable Forward(const Variable& x) override;
  std::string ToString() const override { return "ReLU()"; }
};

class GELU : public Module {
 public:
  Variable Forward(const Variable& x) override;
  std::string ToString() const override { return "GELU(approximate='tanh')"; }
};

enum class Activation { kReLU, kGELU };

/// A new module computing `activation`.
std::shared_ptr<Module> MakeActivation(Activation activation);
/// Parses "relu" or "gelu" (flags); anything else is InvalidArgument.
absl::StatusOr<Activation> ParseActivation(absl::string_view name);

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_ACTIVATION_H_
