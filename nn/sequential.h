// nn::Sequential: children applied one after another, named "0", "1", "2", ... as in PyTorch, so its
// parameters are "0.weight", "0.bias", "2.weight", ... (activations have none but still take a number).
// One fusion: a Linear directly followed by a ReLU runs as one node (Linear::ForwardRelu), the ReLU in
// the GEMM's epilogue; the values are those of the two modules one after the other.
#ifndef TINYDDP_NN_SEQUENTIAL_H_
#define TINYDDP_NN_SEQUENTIAL_H_

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace tinyddp::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  /// Appends `module` under the next index. Precondition: module is not null.
  Sequential& Append(std::shared_ptr<Module> module);
  /// The children's Forward, in order (a Linear followed by a ReLU as Linear::ForwardRelu).
  Variable Forward(const Variable& x) override;
  /// PyTorch's repr: "Sequential(\n  (0): Linear(...)\n  (1): ReLU()\n)".
  std::string ToString() const override;
  size_t size() const { return Children().size(); }
  /// Child i. Precondition: i < size().
  const std::shared_ptr<Module>& operator[](size_t i) const;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_SEQUENTIAL_H_
