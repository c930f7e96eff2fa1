// Nodes and recording (autograd/node.h), including leaf gradient accumulation (AccumulateGrad::Apply)
// and the slot it offers to the op that produces a leaf's gradient (AccumulateGrad::Slot).
#include "autograd/node.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "autograd/grad_mode.h"
#include "autograd/weight_grad_deferral.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {
// Process-wide, so nodes built on different threads still get distinct, increasing numbers.
std::atomic<uint64_t> next_sequence_nr{0};

std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", ShapeToString(t.shape()), " on ", t.device().ToString());
}
}  // namespace

Node::Node(const char* name, std::vector<std::shared_ptr<Node>> next, const Tensor& value)
    : name_(name),
      sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)),
      next_(std::move(next)),
      shape_(value.shape()),
      dtype_(value.dtype()),
      device_(value.device()) {}

FunctionNode::FunctionNode(const char* name, std::vector<std::shared_ptr<Node>> next,
                           absl::InlinedVector<bool, 3> needs_grad,
                           const Tensor& value, BackwardFn backward)
    : Node(name, std::move(next), value), needs_grad_(std::move(needs_grad)), backward_(std::move(backward)) {}

// Checks the backward's answer against the op's inputs, so a shape bug in one backward stops right there
// with the op's name instead of surfacing as a wrong gradient somewhere else.
Grads FunctionNode::Apply(const NodeInput& in) {
  Grads grads = backward_(in.grad, NeedsGrad(needs_grad_, in.leaf_slots));
  TINYDDP_CHECK_OP(grads.size() == next().size(), name(), "backward returned ", grads.size(),
                   " gradients for an op with ", next().size(), " inputs; hint: return one per input");
  for (size_t i = 0; i < grads.size(); ++i) {
    const Node* to = next()[i].get();
    if (to == nullptr) continue;  // this input needs no gradient
    const Tensor& g = grads[i];
    if (!g.defined()) {
      const bool filled_slot = i < in.leaf_slots.size() && in.leaf_slots[i].into.defined();
      const bool deferred = to->is_accumulator() && WeightGradDeferral::Active() != nullptr;  // left to W
      TINYDDP_CHECK_OP(filled_slot || deferred, "Backward", name(), " returned no gradient for its input ", i,
                       ", which requires grad; hint: a backward must fill every input whose needs_grad is set");
      continue;
    }
    TINYDDP_CHECK_OP(g.shape() == to->shape() && g.dtype() == to->dtype() && g.device() == to->device(), "Backward",
                     name(), " produced a gradient ", Describe(g), " for its input ", i, ", whose value is ",
                     DTypeName(to->dtype()), " ", ShapeToString(to->shape()), " on ", to->device().ToString(),
                     "; hint: that op's backward has a shape bug");
  }
  return grads;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<internal::VariableState> leaf)
    : Node("AccumulateGrad", {}, leaf->data), leaf_(std::move(leaf)) {}

LeafSlot AccumulateGrad::Slot() const {
  const internal::VariableState& leaf = *leaf_;
  if (!leaf.requires_grad) return {};
  if (leaf.grad.defined()) return {leaf.grad, /*add=*/true};
  return {leaf.grad_destination, /*add=*/false};  // undefined when there is no destination: no slot
}

Grads AccumulateGrad::Apply(const NodeInput& in) {
  internal::VariableState& leaf = *leaf_;
  if (!leaf.requires_grad) return {};  // frozen after the graph was recorded: nothing to accumulate
  if (!in.grad.defined() && WeightGradDeferral::Active() != nullptr) {
    return {};  // a Linear left this gradient as W work (weight_grad_deferral.h): W adds it and runs the hooks
  }
  if (!in.grad.defined()) {
    // The producing op put its result into Slot() itself: added into leaf.grad, or written into the
    // gradient destination, which now becomes the gradient.
    if (!leaf.grad.defined()) leaf.grad = leaf.grad_destination;
  } else if (!leaf.grad.defined() && leaf.grad_destination.defined()) {
    // A fresh gradient with a destination: stored there, so the destination stays the gradient.
    leaf.grad = leaf.grad_destination;
    ops::CopyInto(leaf.grad, in.grad);
  } else if (!leaf.grad.defined()) {
    // The first gradient: keep the engine's tensor when nobody else holds it; otherwise copy, so that a
    // later in-place accumulation cannot change another leaf's gradient through shared memory.
    leaf.grad = in.exclusive ? in.grad : in.grad.Clone();
  } else {
    // In place: when .grad is a view into a DDP bucket, the bucket sees the sum without a copy.
    ops::AddInto(leaf.grad, in.grad);
  }
  // The gradient of this leaf is final for this backward: tell whoever listens (DDP marks it ready).
  // Index loop so a hook may read the list; hooks must not add or remove hooks on this leaf.
  const Variable handle(leaf_);
  for (size_t i = 0; i < leaf.hooks.size(); ++i) leaf.hooks[i].second(handle);
  return {};
}

std::shared_ptr<Node> GradientEdge(const Variable& v) {
  TINYDDP_CHECK_OP(v.defined(), "autograd", "an op input is an undefined Variable");
  if (!v.requires_grad()) return nullptr;
  if (v.grad_fn() != nullptr) return v.grad_fn();
  internal::VariableState& s = *v.state();
  std::shared_ptr<AccumulateGrad> acc = s.accumulator.lock();
  if (acc == nullptr) {
    // Held strongly by the graph only, so it dies with the last graph that uses this leaf.
    acc = std::make_shared<AccumulateGrad>(v.state());
    s.accumulator = acc;
  }
  return acc;
}

Variable Record(const char* name, Tensor output, std::initializer_list<Variable> inputs, BackwardFn backward) {
  bool record = false;
  if (GradModeEnabled()) {
    for (const Variable& v : inputs) record = record || v.requires_grad();
  }
  if (!record) return Variable(std::move(output));

  std::vector<std::shared_ptr<Node>> next;
  absl::InlinedVector<bool, 3> needs_grad;
  next.reserve(inputs.size());
  for (const Variable& v : inputs) {
    next.push_back(GradientEdge(v));
    needs_grad.push_back(next.back() != nullptr);
  }
  auto state = std::make_shared<internal::VariableState>();
  state->grad_fn =
      std::make_shared<FunctionNode>(name, std::move(next), std::move(needs_grad), output, std::move(backward));
  state->data = std::move(output);
  state->requires_grad = true;
  return Variable(std::move(state));
}

}  // namespace tinyddp::autograd
