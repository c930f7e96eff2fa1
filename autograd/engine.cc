// The backward engine (autograd/engine.h): count dependencies, then run every node once all gradients
// flowing into it are summed. Single-threaded, on the caller's thread.
#include "autograd/engine.h"

#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "autograd/node.h"
#include "tensor/internal/check.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

// The gradient summed so far for one node's value, and whether the engine holds the only reference to
// it (then it may be added into in place, or kept by a leaf without a copy).
struct GradBuffer {
  Tensor grad;
  bool exclusive = false;
};

std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", ShapeToString(t.shape()), " on ", t.device().ToString());
}

// Counts, for every node reachable from root, how many edges of the reachable graph point to it: the
// number of gradients it must receive before it can run. Iterative, so deep graphs cannot overflow the
// stack.
absl::flat_hash_map<Node*, int> CountDependencies(Node* root) {
  absl::flat_hash_map<Node*, int> deps;
  deps[root] = 0;
  std::vector<Node*> stack = {root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const std::shared_ptr<Node>& child : node->next()) {
      if (child == nullptr) continue;
      auto [it, first_visit] = deps.try_emplace(child.get(), 0);
      ++it->second;
      if (first_visit) stack.push_back(child.get());
    }
  }
  return deps;
}

// Whether output i of a node may be treated as exclusively owned: it must not share memory with another
// output (Add's backward hands the same tensor to both inputs), nor with the incoming gradient unless
// that was exclusive (a pass-through of our own buffer).
bool OutputIsExclusive(const Grads& out, size_t i, const NodeInput& in) {
  for (size_t j = 0; j < out.size(); ++j) {
    if (j != i && out[i].SharesStorageWith(out[j])) return false;
  }
  return !out[i].SharesStorageWith(in.grad) || in.exclusive;
}

// Adds one contribution into a node's buffer. In place only when the buffer is ours alone.
void Accumulate(GradBuffer& buffer, const Tensor& grad, bool exclusive) {
  if (!buffer.grad.defined()) {
    buffer.grad = grad;
    buffer.exclusive = exclusive;
  } else if (buffer.exclusive) {
    ops::AddInto(buffer.grad, grad);
  } else {
    buffer.grad = ops::Add(buffer.grad, grad);
    buffer.exclusive = true;
  }
}

void CheckGradient(const Node& from, const Node& to, size_t input, const Tensor& grad) {
  TINYDDP_CHECK_OP(grad.defined(), "Backward", from.name(), " returned no gradient for its input ", input,
                   ", which requires grad; hint: a backward must fill every input whose needs_grad is set");
  TINYDDP_CHECK_OP(grad.shape() == to.shape() && grad.dtype() == to.dtype() && grad.device() == to.device(),
                   "Backward", from.name(), " produced a gradient ", Describe(grad), " for its input ", input,
                   ", whose value is ", DTypeName(to.dtype()), " ", ShapeToString(to.shape()), " on ",
                   to.device().ToString(), "; hint: that op's backward has a shape bug");
}

// The callbacks queued (QueueCallback) by the Backward running on this thread; null outside Backward.
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

// The shortcut of NeedsGrad::accumulate_into: a leaf whose .grad is defined, which has received nothing
// yet and whose one remaining contribution comes from `node`, may have it added straight into its .grad
// (for a Linear weight: the gradient GEMM writes there with beta = 1, instead of into a temporary that
// AccumulateGrad would then add).
// A leaf with no .grad but a gradient destination (Variable::set_grad_destination) is offered the
// destination instead, to be written rather than added to.
void OfferLeafGradients(const Node& node, const absl::flat_hash_map<Node*, int>& deps,
                        const absl::flat_hash_map<Node*, GradBuffer>& buffers, NodeInput& in) {
  for (size_t i = 0; i < node.next().size(); ++i) {
    Node* child = node.next()[i].get();
    if (child == nullptr || !child->is_accumulator() || deps.at(child) != 1 || buffers.contains(child)) continue;
    const internal::VariableState& leaf = *static_cast<AccumulateGrad*>(child)->leaf();
    if (!leaf.requires_grad || (!leaf.grad.defined() && !leaf.grad_destination.defined())) continue;
    if (in.accumulate_into.empty()) {
      in.accumulate_into.resize(node.next().size());
      in.offer_is_empty.resize(node.next().size());
    }
    in.offer_is_empty[i] = !leaf.grad.defined();
    in.accumulate_into[i] = in.offer_is_empty[i] ? leaf.grad_destination : leaf.grad;
  }
}

// Ready nodes run newest first (highest sequence number), as in PyTorch: in an MLP that walks the
// layers from the loss back to the input.
struct NewestFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

}  // namespace

void QueueCallback(std::function<void()> callback) {
  TINYDDP_CHECK_OP(current_callbacks != nullptr, "QueueCallback", "called outside Backward; hint: queue "
                   "end-of-backward callbacks from a gradient hook");
  current_callbacks->push_back(std::move(callback));
}

bool InBackward() { return current_callbacks != nullptr; }

void Backward(const Variable& root, const Tensor& seed, bool retain_graph) {
  TINYDDP_CHECK_OP(root.defined(), "Backward", "the root is an undefined Variable");
  TINYDDP_CHECK_OP(root.requires_grad(), "Backward", "the root ", Describe(root.data()),
                   " does not require grad and has no grad_fn, so there is nothing to differentiate; hint: was it "
                   "computed under NoGradGuard, or only from variables with requires_grad=false?");
  GradBuffer first;
  if (seed.defined()) {
    TINYDDP_CHECK_OP(seed.shape() == root.shape() && seed.dtype() == root.dtype() &&
                         seed.device() == root.device(),
                     "Backward", "the seed gradient ", Describe(seed), " does not match the root ",
                     Describe(root.data()), "; hint: the seed has the root's shape, dtype and device");
    first = {seed, /*exclusive=*/false};  // the caller still holds it
  } else {
    TINYDDP_CHECK_OP(root.numel() == 1, "Backward", "a gradient can be created implicitly only for a one-element "
                     "root (a scalar loss), but the root is ", Describe(root.data()),
                     "; hint: reduce it (Sum/Mean) or pass a seed gradient of the same shape");
    Tensor ones = Tensor::Empty(root.shape(), root.dtype(), root.device());
    ops::Fill(ones, 1.0);  // a kernel on the current stream, no host synchronisation
    first = {std::move(ones), /*exclusive=*/true};
  }

  // End-of-backward callbacks (QueueCallback) collect here and run after the loop below.
  // A Backward nested inside a hook gets its own list, and the outer one is restored afterwards.
  std::vector<std::function<void()>> callbacks;
  struct RestoreOnExit {
    std::vector<std::function<void()>>* outer;
    ~RestoreOnExit() { current_callbacks = outer; }
  } restore_on_exit{current_callbacks};
  current_callbacks = &callbacks;

  const std::shared_ptr<Node> root_node = GradientEdge(root);
  absl::flat_hash_map<Node*, int> deps = CountDependencies(root_node.get());
  absl::flat_hash_map<Node*, GradBuffer> buffers;
  buffers[root_node.get()] = std::move(first);

  // Leaves whose gradient is complete run before anything else (contract point 3 in engine.h), first
  // come first served (point 4); other nodes wait in a heap, newest first.
  std::deque<std::shared_ptr<Node>> ready_leaves;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, NewestFirst> ready_ops;
  if (root_node->is_accumulator()) {
    ready_leaves.push_back(root_node);
  } else {
    ready_ops.push(root_node);
  }

  while (!ready_leaves.empty() || !ready_ops.empty()) {
    std::shared_ptr<Node> node;
    if (!ready_leaves.empty()) {
      node = std::move(ready_leaves.front());
      ready_leaves.pop_front();
    } else {
      node = ready_ops.top();
      ready_ops.pop();
    }
    TINYDDP_CHECK_OP(!node->released(), "Backward", "trying to backward through the graph a second time: the "
                     "tensors saved by ", node->name(), " were freed by an earlier Backward; hint: pass "
                     "retain_graph=true to the earlier Backward, or recompute the forward pass");
    auto it = buffers.find(node.get());
    NodeInput in;
    in.grad = std::move(it->second.grad);
    in.exclusive = it->second.exclusive;
    buffers.erase(it);
    if (!node->is_accumulator()) OfferLeafGradients(*node, deps, buffers, in);

    const Grads out = node->Apply(in);
    if (!retain_graph) node->ReleaseSaved();

    for (size_t i = 0; i < node->next().size(); ++i) {
      const std::shared_ptr<Node>& child = node->next()[i];
      if (child == nullptr) continue;
      const bool accumulated_directly = !out[i].defined() && i < in.accumulate_into.size() &&
                                        in.accumulate_into[i].defined();
      if (accumulated_directly) {
        buffers[child.get()];  // stays undefined: AccumulateGrad then only runs the hooks
      } else {
        CheckGradient(*node, *child, i, out[i]);
        Accumulate(buffers[child.get()], out[i], OutputIsExclusive(out, i, in));
      }
      if (--deps[child.get()] == 0) {
        if (child->is_accumulator()) {
          ready_leaves.push_back(child);
        } else {
          ready_ops.push(child);
        }
      }
    }
  }

  // The graph is done; run the end-of-backward callbacks (index loop: a callback may queue another).
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> callback = std::move(callbacks[i]);
    callback();
  }
}

}  // namespace tinyddp::autograd
