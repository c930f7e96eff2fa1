// The backward engine: Backward(loss) walks the graph recorded by the ops in functions.h from the loss
// back to the leaves, calling each node's backward once all gradients flowing into it are summed, and
// accumulates the result into the leaves' .grad. It is micrograd's backward() (a topological sort and a
// loop) plus the three things real training needs: dependency counting, leaf hooks, and freeing the graph.
//
// ## The post-accumulate-grad hook contract (the seam DistributedDataParallel is built on)
//
// DDP registers one hook per parameter (Variable::RegisterPostAccumulateGradHook) and launches a
// bucket's all_reduce from the hook of the bucket's last parameter. The engine guarantees:
//
//  1. Once per backward. During one Backward call, the hooks of a leaf run exactly once if the graph
//     reaches the leaf, and not at all otherwise (DDP's find_unused_parameters handles those).
//  2. When final. They run right after the leaf's gradient for this backward has been accumulated into
//     leaf.grad(), with every contribution summed first: a parameter used by two ops gets its hooks
//     after both contributions, never between them.
//  3. As early as possible. A leaf's accumulation runs the moment its last contribution is produced,
//     before any other pending node, so the last layer's hooks fire while earlier layers are still
//     being differentiated. That is what lets communication overlap the rest of backward.
//  4. In production order. Leaves are accumulated, and their hooks run, in the order backward produces
//     their final gradients; among the inputs of one op, in the op's input order. Ready nodes run newest
//     op first, so the order is a deterministic function of the graph. For an MLP built by nn::MLP it
//     is the reverse of registration order by layer: 2.weight, 2.bias, 0.weight, 0.bias.
//  5. In place. When leaf.grad() is already defined (for DDP: a view into a bucket, set with
//     set_grad), the gradient is added into it in place, so the view stays a view and the bucket holds
//     the sum. When it is undefined and the leaf has a gradient destination (Variable::
//     set_grad_destination: DDP's bucket view after ZeroGrad(set_to_none)), the gradient is stored
//     there and the destination becomes .grad. Else the new gradient is stored without a copy if the
//     engine holds the only reference to it, and copied otherwise.
//     The fast path: when one op produces the leaf's whole gradient, the engine offers it the leaf's
//     slot (AccumulateGrad::Slot: .grad to add into, or the destination to write) and the op may fill
//     it itself: Linear's weight gradient is then one GEMM straight into the bucket view, beta = 1 or 0,
//     and its bias gradient one column sum, with no temporary and no copy (NeedsGrad::accumulate_into,
//     NeedsGrad::write_into).
//  6. Same thread, enqueued work. Hooks run on the thread calling Backward, inside it; Backward returns
//     after the last hook returns. On CUDA the accumulation is only enqueued on the current stream when
//     the hook runs: a hook that hands the gradient to another stream (NCCL) must first make that stream
//     wait on an event recorded on the current stream.
//
//  7. A leaf's value may be read once more after its hooks. Linear records its input gradient
//     (dx = dy @ w, which reads w) as a node of its own, just before the node that makes dw and db, so
//     that w's hooks fire between the two GEMMs (autograd/linear.cc). By 4 (newest ready node first)
//     that input-gradient node is the next op to run after the hooks. So whoever updates a parameter
//     during backward (dist/accel/fused_optimizer: --optimizer_in_backward) must wait until
//     OpsRunInBackward() has moved past its value at the hook: then no op left reads the old value.
//
// A hook must not register or remove hooks on its own leaf, and should not capture its own leaf's
// Variable (that is a reference cycle; the leaf is passed as the argument).
#ifndef TINYDDP_AUTOGRAD_ENGINE_H_
#define TINYDDP_AUTOGRAD_ENGINE_H_

#include <cstdint>
#include <functional>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace tinyddp::autograd {

/// Computes d(root)/d(leaf), weighted by `seed`, for every leaf that requires grad and that root
/// depends on, and accumulates it into leaf.grad(); runs post-accumulate-grad hooks as stated above.
///   seed:         the gradient of the final objective w.r.t. root; undefined means 1, which is allowed
///                 only for a one-element root (a scalar loss). Otherwise root's shape, dtype and device.
///   retain_graph: keep the tensors the graph saved, so Backward may run through it again; by default
///                 they are freed as each node finishes, and a second Backward through the same nodes
///                 stops with a message saying so.
/// Preconditions: root requires grad (it was computed with grad mode on from something that requires
/// grad, or it is such a leaf). Misuse stops the program with a message naming the problem.
void Backward(const Variable& root, const Tensor& seed = Tensor(), bool retain_graph = false);

/// End-of-backward callbacks (PyTorch's Engine::queue_callback), added for DistributedDataParallel: its
/// reducer queues one from the first gradient hook of a backward, to wait for every bucket's all_reduce
/// and to find parameters whose hooks never ran. Queued callbacks run once, in queue order, on the calling
/// thread after the last node of the current Backward has run and before Backward returns; a callback may
/// queue further callbacks, which run in the same pass. Precondition: called while a Backward is running
/// on this thread (from a hook or a node's backward).
void QueueCallback(std::function<void()> callback);
/// True while a Backward is running on the calling thread.
bool InBackward();
/// The number of op nodes (not leaf accumulations) the Backward running on this thread has run so far
/// (its kernels enqueued, on a GPU). A hook compares two readings to know that the engine has moved past
/// the op after its own (promise 7). 0 outside Backward.
int64_t OpsRunInBackward();

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_ENGINE_H_
