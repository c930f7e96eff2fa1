// Variable: a Tensor together with what autograd needs to differentiate through it. The handle that
// nn::Module parameters, losses and DistributedDataParallel's gradient hooks all work with.
//
// Two kinds of Variable, as in PyTorch:
//   leaf      made by the user (parameters, inputs). grad_fn() is null. When requires_grad() is true,
//             Backward (engine.h) accumulates the gradient into grad() and then calls the leaf's
//             post-accumulate-grad hooks: the seam DDP is built on.
//   non-leaf  the result of an op in functions.h, recorded while grad mode is on and some input requires
//             grad. grad_fn() is the Node that turns its gradient into its inputs' gradients. Its own
//             grad() is never filled (PyTorch does the same unless retain_grad() is called).
//
// A Variable is a cheap handle to shared state, like Tensor and std::shared_ptr: copies refer to the
// same variable, and `const` applies to the handle, not to the state (set_grad is a const method, just
// as Tensor::data<T>() const returns a mutable pointer). Not thread-safe: one thread builds a graph and
// runs its backward.
#ifndef TINYDDP_AUTOGRAD_VARIABLE_H_
#define TINYDDP_AUTOGRAD_VARIABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace tinyddp::autograd {

class Node;
class AccumulateGrad;
class Variable;

/// Called with a leaf right after its gradient for the current backward is final (see engine.h for
/// exactly when). The hook may read and modify leaf.grad() in place (DDP hands it to a bucket).
using PostAccumulateGradHook = std::function<void(const Variable& leaf)>;
/// Names one registered hook, for RemovePostAccumulateGradHook.
using HookHandle = int64_t;

namespace internal {
/// The state every handle of one variable shares. Only autograd's own files touch it directly.
struct VariableState {
  Tensor data;
  Tensor grad;  // undefined until the first backward reaches this leaf (or set_grad)
  Tensor grad_destination;  // where a fresh gradient is written when grad is undefined (optional)
  bool requires_grad = false;
  std::string name;
  std::shared_ptr<Node> grad_fn;               // non-leaves: the node that produced this value
  std::weak_ptr<AccumulateGrad> accumulator;   // leaves: the graph's sink for this leaf, while a graph holds it
  std::vector<std::pair<HookHandle, PostAccumulateGradHook>> hooks;
  HookHandle next_hook = 0;
};
}  // namespace internal

class Variable {
 public:
  /// An undefined variable (defined() is false).
  Variable() = default;
  /// A leaf holding `data` (shared with the caller, not copied). Precondition: data is defined, and
  /// floating point if requires_grad.
  explicit Variable(Tensor data, bool requires_grad = false, std::string name = "");
  /// Wraps existing state (autograd's own files; user code never needs it).
  explicit Variable(std::shared_ptr<internal::VariableState> state) : state_(std::move(state)) {}

  // --- The value -------------------------------------------------------------------------------
  bool defined() const { return state_ != nullptr; }
  const Tensor& data() const;
  /// Replaces a leaf's data (nn::Module::To moves parameters to a GPU this way; a defined grad moves
  /// with it). Precondition: leaf; while a recorded graph still uses the leaf, shape, dtype and device
  /// must not change.
  void set_data(Tensor data) const;
  const Shape& shape() const { return data().shape(); }
  int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }

  // --- Autograd state --------------------------------------------------------------------------
  bool requires_grad() const;
  /// Precondition: leaf; `on` needs a floating-point dtype.
  void set_requires_grad(bool on) const;
  bool is_leaf() const;
  /// The node that produced this value; null for leaves.
  const std::shared_ptr<Node>& grad_fn() const;
  /// Optional label for messages ("0.weight"); nn::Module sets it to the parameter's dotted name.
  const std::string& name() const;
  void set_name(std::string name) const;

  // --- The gradient ----------------------------------------------------------------------------
  /// The accumulated gradient; undefined until a backward reaches this leaf or set_grad is called.
  const Tensor& grad() const;
  /// Makes `grad` this variable's gradient without copying: it may be a view into a larger buffer (a
  /// DDP bucket). Later backwards accumulate into it in place (ops::AddInto), so a view stays a view.
  /// An undefined tensor clears the gradient. Precondition: requires_grad(); a defined grad has
  /// data's shape, dtype and device.
  void set_grad(Tensor grad) const;
  /// Where the next fresh gradient goes: when a backward reaches this leaf while grad() is undefined,
  /// the gradient is stored in `destination` and grad() becomes `destination` (a view stays a view).
  /// The op producing it may write there directly (Linear's weight gradient: its GEMM's output), so a
  /// DDP bucket view is filled with no temporary and no copy even after ZeroGrad(set_to_none). Without
  /// a destination, or while grad() is defined, nothing changes. An undefined tensor removes it.
  /// Precondition: requires_grad(); a defined destination has data's shape, dtype and device.
  void set_grad_destination(Tensor destination) const;

  // --- Hooks (leaves only) ---------------------------------------------------------------------
  /// Registers `hook` to run once per backward that reaches this leaf, right after its gradient is
  /// final (engine.h states the exact contract). Hooks run in registration order. Precondition: a
  /// leaf with requires_grad().
  HookHandle RegisterPostAccumulateGradHook(PostAccumulateGradHook hook) const;
  /// Removes a hook registered on this variable; unknown handles are ignored. Not from inside a hook.
  void RemovePostAccumulateGradHook(HookHandle handle) const;

  // --- Identity --------------------------------------------------------------------------------
  /// A new leaf sharing this variable's data, with no history and requires_grad() == false.
  Variable Detach() const;
  /// True when both handles refer to the same variable.
  bool Is(const Variable& other) const { return state_ == other.state_; }
  /// The shared state (autograd's own files).
  const std::shared_ptr<internal::VariableState>& state() const { return state_; }

 private:
  internal::VariableState& checked_state(const char* what) const;
  std::shared_ptr<internal::VariableState> state_;
};

/// Clears the gradients of `variables`: set_to_none drops them (the next backward stores a fresh
/// gradient, PyTorch's default); otherwise each defined gradient is filled with zeros in place, which
/// keeps views (DDP buckets) alive.
void ZeroGrad(absl::Span<const Variable> variables, bool set_to_none = true);

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_VARIABLE_H_
