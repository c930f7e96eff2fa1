// The backward engine (autograd/engine.h). Backward is micrograd's "topological sort and a loop", with
// the sort done Kahn's way (count the edges into every node; a node is ready once that many gradients
// have arrived), so that a leaf can run the moment its gradient is complete:
//
//   graph = CountDependencies(root)          the sort: how many gradients each node will receive
//   the root receives the seed
//   while some node is ready:                the loop
//     out = node->Apply(sum of its grads)      an op's backward lambda, or AccumulateGrad (leaf.grad += ...,
//                                              then the leaf's hooks)
//     each child receives its out[i]           and is ready when it has them all
//   run the end-of-backward callbacks
//
// Around it, one helper per concern: which ready node runs first (ReadyQueue), how a node's gradients
// are summed (Receive), and the one extension point through which an op may put a leaf's gradient in
// place itself (OfferLeafSlots). Single-threaded, on the caller's thread.
#include "autograd/engine.h"

#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "autograd/node.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", ShapeToString(t.shape()), " on ", t.device().ToString());
}

// What Backward knows about one node of the graph: how many gradients it will receive, and their sum.
struct Pending {
  int in_degree = 0;  // edges of the graph that end here (the root's one is the seed)
  int received = 0;
  Tensor grad;             // the sum so far; stays undefined if an op filled a leaf's slot instead
  bool exclusive = false;  // only the engine holds `grad`: it may be added into, or kept by a leaf, as is
};
using Graph = absl::flat_hash_map<Node*, Pending>;

// The sort: every node reachable from root, with its in-degree. Iterative, so a deep graph cannot
// overflow the stack.
Graph CountDependencies(Node* root) {
  Graph graph;
  graph[root].in_degree = 1;  // the seed
  std::vector<Node*> stack = {root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const std::shared_ptr<Node>& child : node->next()) {
      if (child == nullptr) continue;
      auto [it, first_visit] = graph.try_emplace(child.get());
      ++it->second.in_degree;
      if (first_visit) stack.push_back(child.get());
    }
  }
  return graph;
}

// Adds one incoming gradient to a node's sum: in place when the sum is the engine's alone, otherwise
// into a new tensor. An undefined gradient is one an op put into a leaf's slot itself: nothing to add.
// Returns true when this was the node's last gradient, so it is ready to run.
bool Receive(Pending& node, const Tensor& grad, bool exclusive) {
  if (!grad.defined()) {
    // nothing to add
  } else if (!node.grad.defined()) {
    node.grad = grad;
    node.exclusive = exclusive;
  } else if (node.exclusive) {
    ops::AddInto(node.grad, grad);
  } else {
    node.grad = ops::Add(node.grad, grad);
    node.exclusive = true;
  }
  return ++node.received == node.in_degree;
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

// The extension point (engine.h, point 5). A leaf that gets its whole gradient from this op (one edge
// into its AccumulateGrad) offers the op its slot: its .grad to add into, or its gradient destination
// to write. The op's backward may fill it (Linear's weight GEMM, beta 1 or 0: no temporary, no copy)
// and return no gradient for that input (NeedsGrad::accumulate_into, write_into). A leaf with several
// contributors is never offered one: they are summed first (point 2).
LeafSlots OfferLeafSlots(const Node& op, const Graph& graph) {
  LeafSlots slots;
  for (size_t i = 0; i < op.next().size(); ++i) {
    const Node* child = op.next()[i].get();
    if (child == nullptr || !child->is_accumulator() || graph.at(child).in_degree != 1) continue;
    slots.resize(op.next().size());
    slots[i] = static_cast<const AccumulateGrad*>(child)->Slot();
  }
  return slots;
}

// The nodes whose gradients are all in. AccumulateGrad nodes run first, in the order they became ready
// (engine.h points 3 and 4: a leaf's hooks fire as soon as its gradient is final, in production order);
// other nodes newest first, as in PyTorch (in an MLP: from the loss back towards the input).
class ReadyQueue {
 public:
  bool empty() const { return leaves_.empty() && ops_.empty(); }
  void Push(std::shared_ptr<Node> node) {
    if (node->is_accumulator()) {
      leaves_.push_back(std::move(node));
    } else {
      ops_.push(std::move(node));
    }
  }
  std::shared_ptr<Node> Pop() {
    std::shared_ptr<Node> node;
    if (!leaves_.empty()) {
      node = std::move(leaves_.front());
      leaves_.pop_front();
    } else {
      node = ops_.top();
      ops_.pop();
    }
    return node;
  }

 private:
  struct NewestFirst {
    bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
      return a->sequence_nr() < b->sequence_nr();
    }
  };
  std::deque<std::shared_ptr<Node>> leaves_;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, NewestFirst> ops_;
};

// The callbacks queued (QueueCallback) by the Backward running on this thread; null outside Backward.
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;
// The op nodes that Backward has run so far (OpsRunInBackward).
thread_local int64_t current_ops_run = 0;

// Collects one Backward's callbacks and runs them at its end. A Backward nested inside a hook gets its
// own list; the outer one is restored when the inner one returns.
class CallbackScope {
 public:
  CallbackScope() : outer_(current_callbacks), outer_ops_run_(current_ops_run) {
    current_callbacks = &callbacks_;
    current_ops_run = 0;
  }
  ~CallbackScope() {
    current_callbacks = outer_;
    current_ops_run = outer_ops_run_;
  }
  void RunAll() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {  // by index: a callback may queue another
      std::function<void()> callback = std::move(callbacks_[i]);
      callback();
    }
  }

 private:
  std::vector<std::function<void()>>* outer_;
  int64_t outer_ops_run_;
  std::vector<std::function<void()>> callbacks_;
};

// The gradient the root starts from, checked: the caller's seed (not ours to modify), or 1 for a scalar.
Tensor SeedGradient(const Variable& root, const Tensor& seed) {
  TINYDDP_CHECK_OP(root.defined(), "Backward", "the root is an undefined Variable");
  TINYDDP_CHECK_OP(root.requires_grad(), "Backward", "the root ", Describe(root.data()),
                   " does not require grad and has no grad_fn, so there is nothing to differentiate; hint: was it "
                   "computed under NoGradGuard, or only from variables with requires_grad=false?");
  if (seed.defined()) {
    TINYDDP_CHECK_OP(seed.shape() == root.shape() && seed.dtype() == root.dtype() &&
                         seed.device() == root.device(),
                     "Backward", "the seed gradient ", Describe(seed), " does not match the root ",
                     Describe(root.data()), "; hint: the seed has the root's shape, dtype and device");
    return seed;
  }
  TINYDDP_CHECK_OP(root.numel() == 1, "Backward", "a gradient can be created implicitly only for a one-element "
                   "root (a scalar loss), but the root is ", Describe(root.data()),
                   "; hint: reduce it (Sum/Mean) or pass a seed gradient of the same shape");
  Tensor ones = Tensor::Empty(root.shape(), root.dtype(), root.device());
  ops::Fill(ones, 1.0);  // a kernel on the current stream, no host synchronisation
  return ones;
}

}  // namespace

void QueueCallback(std::function<void()> callback) {
  TINYDDP_CHECK_OP(current_callbacks != nullptr, "QueueCallback", "called outside Backward; hint: queue "
                   "end-of-backward callbacks from a gradient hook");
  current_callbacks->push_back(std::move(callback));
}

bool InBackward() { return current_callbacks != nullptr; }

int64_t OpsRunInBackward() { return current_ops_run; }

void Backward(const Variable& root, const Tensor& seed, bool retain_graph) {
  const Tensor first = SeedGradient(root, seed);
  const bool first_is_ours = !seed.defined();
  CallbackScope callbacks;

  const std::shared_ptr<Node> root_node = GradientEdge(root);
  Graph graph = CountDependencies(root_node.get());
  ReadyQueue ready;
  if (Receive(graph.at(root_node.get()), first, first_is_ours)) ready.Push(root_node);

  while (!ready.empty()) {
    const std::shared_ptr<Node> node = ready.Pop();
    TINYDDP_CHECK_OP(!node->released(), "Backward", "trying to backward through the graph a second time: the "
                     "tensors saved by ", node->name(), " were freed by an earlier Backward; hint: pass "
                     "retain_graph=true to the earlier Backward, or recompute the forward pass");
    Pending& mine = graph.at(node.get());
    const NodeInput in{std::move(mine.grad), mine.exclusive, OfferLeafSlots(*node, graph)};
    const Grads out = node->Apply(in);
    if (!node->is_accumulator()) ++current_ops_run;
    if (!retain_graph) node->ReleaseSaved();

    for (size_t i = 0; i < node->next().size(); ++i) {
      const std::shared_ptr<Node>& child = node->next()[i];
      if (child == nullptr) continue;  // this input needs no gradient
      if (Receive(graph.at(child.get()), out[i], OutputIsExclusive(out, i, in))) ready.Push(child);
    }
  }
  callbacks.RunAll();
}

}  // namespace tinyddp::autograd
