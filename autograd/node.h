// Node: one recorded op in the autograd graph, and Record(), which every differentiable op calls to
// add one. The graph points backwards: a result's grad_fn is a Node, and each Node points to the
// nodes that receive its inputs' gradients (next()). A leaf that requires grad is represented by an
// AccumulateGrad node, the sink where its gradient is summed into Variable::grad().
//
// Ops (functions.h) are written micrograd-style: the forward computes with tensor ops and hands
// Record() a lambda, the backward, that captures the tensors it needs:
//
//   Variable Relu(const Variable& x) {
//     Tensor y = ops::Relu(x.data());
//     return Record("Relu", y, {x}, [y](const Tensor& g, const NeedsGrad&) -> Grads {
//       return {ops::ReluBackward(g, y)};
//     });
//   }
//
// The engine (engine.h) runs the nodes; nothing here is thread-safe.
#ifndef TINYDDP_AUTOGRAD_NODE_H_
#define TINYDDP_AUTOGRAD_NODE_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace tinyddp::autograd {

/// Gradients of an op's inputs, by input position; undefined where the input needs none.
using Grads = absl::InlinedVector<Tensor, 3>;

/// Where the op producing a leaf's whole gradient may put it itself, instead of returning it (the
/// extension point of engine.h, point 5): the leaf's defined .grad, to add into, or else its gradient
/// destination, to overwrite. AccumulateGrad::Slot() makes it; `into` is undefined when there is neither.
struct LeafSlot {
  Tensor into;
  bool add = false;  // true: `into` is .grad, add to it (GEMM beta = 1); false: overwrite it (beta = 0)
};
using LeafSlots = absl::InlinedVector<LeafSlot, 3>;  // by input position; empty when none is offered

/// What a backward function is told about the op's inputs.
class NeedsGrad {
 public:
  NeedsGrad() = default;
  NeedsGrad(absl::InlinedVector<bool, 3> needs, LeafSlots slots) : needs_(std::move(needs)), slots_(std::move(slots)) {}
  /// Whether input i requires a gradient. Backward functions skip the others (the first Linear layer
  /// never computes the gradient of the data batch).
  bool operator[](size_t i) const { return needs_[i]; }
  size_t size() const { return needs_.size(); }
  /// Optional shortcut: when input i is a leaf whose .grad is already defined and this op is its only
  /// contributor in this backward, the engine offers that .grad here. A backward may then add its
  /// result into it directly (ops::MatMulInto with beta = 1 in Linear: no temporary, no separate
  /// AddInto) and return an undefined tensor for i. Null when not offered; ignoring it is always fine.
  const Tensor* accumulate_into(size_t i) const { return Offer(i, /*add=*/true); }
  /// The same shortcut when the leaf's .grad is undefined but it has a gradient destination
  /// (Variable::set_grad_destination, e.g. a DDP bucket view): the backward may write (not add) its
  /// result there (beta = 0) and return an undefined tensor for i; the destination becomes the .grad.
  const Tensor* write_into(size_t i) const { return Offer(i, /*add=*/false); }

 private:
  const Tensor* Offer(size_t i, bool add) const {
    const bool offered = i < slots_.size() && slots_[i].into.defined() && slots_[i].add == add;
    return offered ? &slots_[i].into : nullptr;
  }
  absl::InlinedVector<bool, 3> needs_;
  LeafSlots slots_;
};

/// An op's backward: the gradient of its output in, the gradients of its inputs out.
using BackwardFn = std::function<Grads(const Tensor& grad_output, const NeedsGrad& needs_grad)>;

/// What the engine hands a node when it runs.
struct NodeInput {
  /// The summed gradient of the node's value. Undefined only for an AccumulateGrad whose producer
  /// put the gradient into the leaf's slot itself.
  Tensor grad;
  /// No one but the engine holds `grad`, so it may be kept without a copy.
  bool exclusive = false;
  /// The slots offered to an op for the leaves among its inputs (see LeafSlot, NeedsGrad).
  LeafSlots leaf_slots;
};

class Node {
 public:
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op's name for messages ("Linear", "AccumulateGrad").
  const char* name() const { return name_; }
  /// Creation order; among nodes that are ready, the engine runs the newest first (as PyTorch does).
  uint64_t sequence_nr() const { return sequence_nr_; }
  /// For each input of the op: the node that receives its gradient, or null when it needs none.
  const std::vector<std::shared_ptr<Node>>& next() const { return next_; }
  /// Shape, dtype and device of the value this node's incoming gradient is for; the engine checks
  /// every gradient against them.
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  /// True for the AccumulateGrad sink of a leaf.
  virtual bool is_accumulator() const { return false; }

  /// Runs the backward on the summed gradient of this node's value. Returns one gradient per next()
  /// entry, of that node's shape, dtype and device: defined wherever next() is non-null, except where
  /// the op filled the leaf slot it was offered.
  virtual Grads Apply(const NodeInput& in) = 0;
  /// Drops what the backward needed (saved tensors), after a backward without retain_graph.
  virtual void ReleaseSaved() {}
  /// True once ReleaseSaved ran: Apply would need what is gone.
  virtual bool released() const { return false; }

 protected:
  Node(const char* name, std::vector<std::shared_ptr<Node>> next, const Tensor& value);

 private:
  const char* name_;
  uint64_t sequence_nr_;
  std::vector<std::shared_ptr<Node>> next_;
  Shape shape_;
  DType dtype_;
  Device device_;
};

/// The node of an op recorded by Record(): its backward is a lambda written beside the forward.
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, std::vector<std::shared_ptr<Node>> next, absl::InlinedVector<bool, 3> needs_grad,
               const Tensor& value, BackwardFn backward);
  Grads Apply(const NodeInput& in) override;
  void ReleaseSaved() override { backward_ = nullptr; }  // the lambda's captures are the saved tensors
  bool released() const override { return backward_ == nullptr; }

 private:
  absl::InlinedVector<bool, 3> needs_grad_;
  BackwardFn backward_;
};

/// The sink of a leaf that requires grad: sums the gradient into the leaf's .grad (in place when it is
/// defined, so views stay views; nothing to do when the producer put it into Slot() itself) and then
/// calls the leaf's post-accumulate-grad hooks. engine.h, point 5, states every case.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<internal::VariableState> leaf);
  bool is_accumulator() const override { return true; }
  Grads Apply(const NodeInput& in) override;
  /// Where an op that produces this leaf's whole gradient may put it itself: .grad (add) when defined,
  /// else the gradient destination (write). None when neither, or when the leaf stopped requiring grad.
  /// The engine offers it only to a sole contributor: anything else must be summed before the leaf sees it.
  LeafSlot Slot() const;
  const std::shared_ptr<internal::VariableState>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<internal::VariableState> leaf_;
};

/// The node that receives `v`'s gradient: its grad_fn, or for a leaf that requires grad its
/// AccumulateGrad (created on first use and shared by every graph alive at the same time, so a leaf
/// used twice is summed once). Null when v does not require grad.
std::shared_ptr<Node> GradientEdge(const Variable& v);

/// Wraps `output`, computed by op `name` from `inputs`, in a Variable. When grad mode is on and some
/// input requires grad, the result gets a FunctionNode running `backward`; otherwise it is a plain leaf
/// and `backward` is dropped unused.
Variable Record(const char* name, Tensor output, std::initializer_list<Variable> inputs, BackwardFn backward);

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_NODE_H_
