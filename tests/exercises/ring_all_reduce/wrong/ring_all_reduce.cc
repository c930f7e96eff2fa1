// Exercise 7, a known WRONG solution, kept so that CI proves the check rejects it
// (:rejects_wrong_solution). It talks only to its ring neighbours, with point-to-point calls and no
// collective, and every rank ends with the right sum; but it passes the WHOLE tensor around the ring, n-1
// times: (n-1) x the tensor per rank instead of the ring's 2(n-1)/n, and n-1 steps instead of 2(n-1).
#include "tests/exercises/ring_all_reduce/ring_all_reduce.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::Status RingAllReduce(dist::ProcessGroup& pg, Tensor& tensor) {
  const int n = pg.size(), rank = pg.rank();
  Tensor travelling = tensor.Clone(), arriving = Tensor::Empty({tensor.numel()});
  for (int s = 0; s < n - 1; ++s) {  // each rank's whole tensor visits every other rank
    RETURN_IF_ERROR(pg.BatchSendRecv({{dist::P2POp::Kind::kSend, travelling, (rank + 1) % n},
                                      {dist::P2POp::Kind::kRecv, arriving, (rank - 1 + n) % n}})->Wait());
    ops::AddInto(tensor, arriving);
    ops::CopyInto(travelling, arriving);
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::exercises
