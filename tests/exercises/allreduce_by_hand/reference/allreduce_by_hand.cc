// Exercise 1, a reference solution: pad to n equal blocks, reduce-scatter them (rank r gets block r of
// the sum), all-gather the blocks (everyone gets all of them), drop the padding.
#include "tests/exercises/allreduce_by_hand/allreduce_by_hand.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::Status AllReduceByHand(dist::ProcessGroup& pg, Tensor& tensor) {
  const int64_t n = pg.size();
  const int64_t numel = tensor.numel();
  const int64_t block = (numel + n - 1) / n;  // the last rank's block holds the padding
  Tensor padded = Tensor::Zeros({block * n}, tensor.dtype(), tensor.device());
  Tensor head = padded.Rows(0, numel);
  ops::CopyInto(head, tensor);
  Tensor mine = Tensor::Empty({block}, tensor.dtype(), tensor.device());
  RETURN_IF_ERROR(pg.ReduceScatter(mine, padded)->Wait());  // block rank() of the sum
  RETURN_IF_ERROR(pg.AllGather(padded, mine)->Wait());      // every block, in rank order
  ops::CopyInto(tensor, padded.Rows(0, numel));
  return absl::OkStatus();
}

}  // namespace tinyddp::exercises
