// Module: the base of every layer and model, with PyTorch's naming so checkpoints and DDP line up.
//
// A Module owns parameters (autograd leaves that require grad) and child modules, both registered in
// order under a name. NamedParameters() walks them like torch.nn.Module.named_parameters(): a module's
// own parameters first, in registration order, then each child's, prefixed with the child's name and a
// dot ("0.weight", "0.bias", "2.weight", ...). That order is the contract DDP builds its buckets from
// (in reverse), and the names are the state_dict keys of checkpoints (nn/checkpoint.h).
// A module also carries its precision (nn/precision.h): under bfloat16 each parameter gets a compute
// copy that layers compute with, while the parameter itself stays the float32 leaf everyone else sees.
// Sits between autograd/ (Variable) and the models in nn/ (Linear, Sequential, MLP). Not thread-safe.
#ifndef TINYDDP_NN_MODULE_H_
#define TINYDDP_NN_MODULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "nn/precision.h"
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
  /// hooks that hold them stay valid. Compute copies are made anew there (hand them to the optimizer
  /// again). Precondition: no recorded graph uses the parameters.
  void To(Device device);
  /// Clears every parameter's gradient (autograd::ZeroGrad).
  void ZeroGrad(bool set_to_none = true);

  // --- Precision (nn/precision.h) ----------------------------------------------------------------
  /// Sets how this module and every descendant compute. kBFloat16 gives each parameter a bfloat16
  /// compute copy, cast from it now (one pass), which the layers compute with and the optimizer keeps
  /// current (Optimizer::SetComputeCopies); kFloat32 drops the copies. The parameters stay float32
  /// either way. Precondition for kBFloat16: float32 parameters.
  void SetPrecision(Precision precision);
  Precision precision() const { return precision_; }
  /// (parameter, its bfloat16 compute copy) for every parameter that has one, in NamedParameters()
  /// order: what an optimizer step must write (Optimizer::SetComputeCopies). Empty under kFloat32.
  std::vector<std::pair<Variable, Tensor>> ComputeCopies() const;
  /// Casts every compute copy again from its parameter (one pass, not a per-step cost). Needed whenever
  /// parameters change other than through an optimizer step that writes the copies: LoadStateDict calls
  /// it; DistributedDataParallel calls it after broadcasting rank 0's weights; code that writes
  /// parameters itself calls it after.
  void RefreshComputeCopies();
  /// Makes `copy` the compute copy of `param` (a parameter of this module or of a descendant) and casts
  /// the parameter into it. `copy` may be a view into a larger buffer: ZeRO-1 (dist/parallel/zero) keeps a
  /// bucket's copies in one flat buffer that its all-gather fills. RefreshComputeCopies writes into it
  /// from then on. Preconditions: kBFloat16; `copy` is bfloat16, of the parameter's shape and device.
  void SetComputeCopy(const Variable& param, Tensor copy);

  /// "Linear(in_features=784, out_features=32, bias=True)", as PyTorch prints it; containers list their children.
  virtual std::string ToString() const = 0;

 protected:
  /// What a layer computes with for its own parameter `param`: the compute copy under kBFloat16, the
  /// parameter's data under kFloat32. Precondition: `param` was registered by this module.
  const Tensor& ComputeValue(const Variable& param) const;
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
  // Makes (when missing or on another device) and fills the bfloat16 compute copy of parameters_[i].
  void CastComputeCopy(size_t i);
  // SetComputeCopy on this module and its descendants; false when `param` is none of their parameters.
  bool ReplaceComputeCopy(const Variable& param, const Tensor& copy);

  std::vector<std::pair<std::string, Variable>> parameters_;
  std::vector<Tensor> compute_copies_;  // by position in parameters_; undefined under kFloat32
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  Precision precision_ = Precision::kFloat32;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_MODULE_H_
