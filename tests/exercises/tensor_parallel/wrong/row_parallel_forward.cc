// Exercise 6, a known wrong solution: one AllReduce with SUM, as the contract says, and the same answer on
// every rank, but the bias is added to each rank's partial sum before the all_reduce, so the sum holds it
// once per rank. (On one rank it is even right, which is why such a bug survives a single-GPU test.) The
// check must reject it, saying the bias was counted pg.size() times.
#include "tests/exercises/tensor_parallel/row_parallel_forward.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::StatusOr<Tensor> RowParallelForward(dist::ProcessGroup& pg, const Tensor& x_local, const Tensor& w_local,
                                          const Tensor& bias) {
  Tensor y = ops::Linear(x_local, w_local, bias);  // the mistake: a bias in every rank's term
  RETURN_IF_ERROR(pg.AllReduce(y, dist::ReduceOp::kSum)->Wait());
  return y;
}

}  // namespace tinyddp::exercises
