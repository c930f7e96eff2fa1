// Exercise 6 (docs/exercises.md): the forward of a row-parallel Linear, the second half of a tensor-parallel
// pair (dist/parallel/tensor/row_parallel_linear.h, docs/tensor_parallel.md). The layer's weight W [out, in]
// is cut by columns over the ranks; so is its input x [rows, in]: the layer before it (column-parallel) left
// each rank its own slice of the features. x @ W^T is then a sum over the ranks of x_r @ W_r^T: each rank
// computes one term, one collective adds them. The bias is whole on every rank.
#ifndef TINYDDP_TESTS_EXERCISES_TENSOR_PARALLEL_ROW_PARALLEL_FORWARD_H_
#define TINYDDP_TESTS_EXERCISES_TENSOR_PARALLEL_ROW_PARALLEL_FORWARD_H_

#include "absl/status/statusor.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::exercises {

/// y = x @ W^T + bias [rows, out], where this rank holds `x_local` [rows, in_r], its columns of x, and
/// `w_local` [out, in_r], the same columns of W; `bias` [out] is the whole bias, on every rank. All float32
/// on the CPU. Collective (every rank calls it with its own slices). Contract: exactly one collective, an
/// AllReduce with SUM of a [rows, out] tensor; every rank returns the same y. Errors: the AllReduce's.
absl::StatusOr<Tensor> RowParallelForward(dist::ProcessGroup& pg, const Tensor& x_local, const Tensor& w_local,
                                          const Tensor& bias);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_TENSOR_PARALLEL_ROW_PARALLEL_FORWARD_H_
