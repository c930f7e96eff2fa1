// Exercise 1: write AllReduceByHand (allreduce_by_hand.h) here, then run
//   ./bazelw test //tests/exercises/allreduce_by_hand:check
// Hints: ReduceScatter wants an input of pg.size() equal blocks, so pad a copy of `tensor` with zeros to
// a multiple of pg.size() (Tensor::Zeros, Tensor::Rows, ops::CopyInto). Each rank receives its block of
// the sum; AllGather puts every rank's block back together, in rank order. Wait for each Work.
#include "tests/exercises/allreduce_by_hand/allreduce_by_hand.h"

namespace tinyddp::exercises {

absl::Status AllReduceByHand(dist::ProcessGroup& pg, Tensor& tensor) {
  (void)pg;
  (void)tensor;
  return absl::UnimplementedError(
      "exercise 1 is not solved yet: write AllReduceByHand in "
      "tests/exercises/allreduce_by_hand/allreduce_by_hand.cc");
}

}  // namespace tinyddp::exercises
