// Module: the base of every layer and model, with PyTorch's naming so checkpoints and DDP line up.
//
// A Module owns parameters (autograd leaves that require grad) and child modules, both registered in
// order under a name. NamedParameters() walks them like torch.nn.Module.named_parameters(): a module's
// own parameters first, in registration order, then each child's, prefixed with the child's name and a
// dot ("0.weight", "0.bias", "2.weight", ...). That order is the contract DDP builds its buckets from
// (in reverse), and the names are the state_dict keys of checkpoints (nn/checkpoint.h).
// Sits between autograd/ (Variable) and the models in nn/ (Linear, Sequential, MLP). Not thread-safe.
#ifndef TINYDDP_NN_MODULE_H_
#define TINYDDP_NN_MODULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace tinyddp::nn {

using autograd::Variable;

class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The computation (every tinyddp module maps one Variable to one Variable).
  virtual Variable Forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return Forward(x); }

  // --- Parameters --------------------------------------------------------------------------------
  /// (dotted name, parameter) pairs: own parameters in registration order, then each child's in
  /// registration order, recursively (PyTorch's named_parameters()).
  std::vector<std::pair<std::string, Variable>> NamedParameters() const;
  /// The same parameters, without names.
  std::vector<Variable> Parameters() const;
  /// Total number of parameter elements.
  int64_t NumParameters() const;
  /// Direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& Children() const { return children_; }
  /// Name -> current parameter data (the tensors themselves, not copies), in NamedParameters() order:
  /// PyTorch's state_dict() for modules without buffers.
  std::vector<std::pair<std::string, Tensor>> StateDict() const;

  // --- Mode, device, gradients -------------------------------------------------------------------
  /// Training or evaluation mode, set on this module and every descendant (no tinyddp layer behaves
  /// differently yet; the flag is there for the ones that will, like dropout).
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool is_training() const { return training_; }
  /// Moves every parameter (and its gradient) to `device`, keeping the same Variables, so optimizers and
  /// hooks that hold them stay valid. Precondition: no recorded graph uses the parameters.
  void To(Device device);
  /// Clears every parameter's gradient (autograd::ZeroGrad).
  void ZeroGrad(bool set_to_none = true);

  /// "Linear(in_features=784, out_features=32, bias=True)", as PyTorch prints it; containers list their children.
  virtual std::string ToString() const = 0;

 protected:
  Module() = default;
  /// Adds a parameter holding `data` (requires grad, named `name` until a parent prefixes it).
  /// Precondition: name is non-empty, has no '.', and is not taken in this module.
  Variable RegisterParameter(const std::string& name, Tensor data);
  /// Adds a child. Its parameters are renamed "<name>.<their name>". Same preconditions on name.
  template <typename M>
  std::shared_ptr<M> RegisterModule(const std::string& name, std::shared_ptr<M> module) {
    AddChild(name, module);
    return module;
  }

 private:
  void CheckNewName(const std::string& name) const;
  void AddChild(const std::string& name, std::shared_ptr<Module> module);
  void CollectParameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;

  std::vector<std::pair<std::string, Variable>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_MODULE_H_
