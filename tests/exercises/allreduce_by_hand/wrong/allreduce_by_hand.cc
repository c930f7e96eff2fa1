// Exercise 1, a known WRONG solution, kept so that CI proves the check rejects it
// (:rejects_wrong_solution). It gives every rank the right sum, bit for bit the same everywhere, with
// exactly two collectives, which is all a check that only counted collectives could see; but it is an
// AllReduce and a Broadcast, not the reduce-scatter and all-gather the exercise is about.
#include "tests/exercises/allreduce_by_hand/allreduce_by_hand.h"

#include "base/status_macros.h"

namespace tinyddp::exercises {

absl::Status AllReduceByHand(dist::ProcessGroup& pg, Tensor& tensor) {
  RETURN_IF_ERROR(pg.AllReduce(tensor, dist::ReduceOp::kSum)->Wait());  // the sum, the easy way
  RETURN_IF_ERROR(pg.Broadcast(tensor, /*root=*/0)->Wait());            // a second call, to look like two
  return absl::OkStatus();
}

}  // namespace tinyddp::exercises
