// The two conjugate communication ops of Megatron-LM's tensor parallelism (Shoeybi et al. 2019, section 3),
// as autograd ops: a piece of the tensor-parallel wing (dist/parallel/tensor/, docs/tensor_parallel.md).
//
// A column-parallel layer followed by a row-parallel one, on tp ranks, the same input X on every rank:
//
//          X (the same on every rank)
//          |
//          f          forward: identity             backward: all_reduce SUM of dX over the tp group
//          |
//     X @ A_r^T       rank r's rows of A (column-parallel): Y_r, rank r's slice of the hidden features
//          |
//        act          elementwise, so each rank applies it to its own slice: no communication
//          |
//     Y_r @ B_r^T     rank r's columns of B (row-parallel): Z_r, a partial sum of every output feature
//          |
//          g          forward: all_reduce SUM of the Z_r       backward: identity
//          |
//     Z + bias        the same on every rank
//
// Why f needs a sum in backward: X fed every rank's A_r, so its gradient is the sum of the contributions
// dY_r @ A_r of all ranks. Why g is an identity in backward: Z = sum_r Z_r, so dZ_r = dZ, which every rank
// already has whole (the loss after Z is computed the same on every rank). Each op is the other's transpose:
// one all_reduce per pair in forward, one in backward (none when X needs no gradient: the data batch).
//
// Errors: the all_reduce's failure goes to `comm`'s status (comm.h), which the loop checks after Backward.
// `layer` names the layer in that error ("layer 2") and in the trace (its index among the Linears).
//
// Tracing (comm.h's tracer): two more identity ops, inserted only while a tracer is active, time each
// layer's backward as one span. A layer's backward is not one C++ scope: the engine runs its nodes (the
// GEMMs, the activation, the bias) one after another, then the next layer's. MarkLayerOutput, at the end
// of a layer's forward, is the first of its nodes to run in backward (it opens the span); MarkLayerInput,
// at its start (after f, for a column layer), the last (it closes it). So f's all_reduce falls between two
// layers' spans, where the picture shows it: the thread waiting. Not thread-safe: the training thread.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_REGION_OPS_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_REGION_OPS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "autograd/variable.h"
#include "dist/parallel/tensor/comm.h"

namespace tinyddp::dist::tensor_parallel {

/// Megatron's f, at the entry of a column-parallel layer: returns x unchanged (sharing its data); its
/// backward sums the gradient over the tp group (a copy of it: the op never changes what the engine holds).
/// When x needs no gradient (the data batch) there is no backward, and so no all_reduce.
autograd::Variable CopyToTensorParallelRegion(const autograd::Variable& x, std::shared_ptr<TensorParallelComm> comm,
                                              LayerLabel layer);

/// Megatron's g, at the exit of a row-parallel layer: returns the sum over the tp group of every rank's
/// `partial` (a new tensor, the same bits on every rank); its backward passes the gradient through. Runs
/// with grad mode off too (evaluation): it is a forward collective, every tp rank must call it.
autograd::Variable ReduceFromTensorParallelRegion(const autograd::Variable& partial,
                                                  std::shared_ptr<TensorParallelComm> comm, LayerLabel layer);

/// Tracing: `y`, the output of layer `index` (after its activation), through an identity op whose backward
/// opens the layer's "backward layer" span (TensorParallelComm::OpenBackwardPart). Returns `y` itself, adding
/// nothing to the graph, when `comm` has no active tracer or y needs no gradient.
autograd::Variable MarkLayerOutput(const autograd::Variable& y, const std::shared_ptr<TensorParallelComm>& comm,
                                   int64_t index);
/// Tracing: `x`, the input of a layer's computation, through an identity op whose backward closes the span
/// MarkLayerOutput opened. Returns `x` itself when `comm` has no active tracer or x needs no gradient (the
/// data: then the end of backward closes it).
autograd::Variable MarkLayerInput(const autograd::Variable& x, const std::shared_ptr<TensorParallelComm>& comm);

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_REGION_OPS_H_
