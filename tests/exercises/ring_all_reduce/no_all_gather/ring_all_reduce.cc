// Exercise 7, a second known WRONG solution (:rejects_no_all_gather): the reduce-scatter half of the ring
// and nothing after it. Each rank ends with one block of the sum (its own) and the other blocks partly
// summed: right neighbours, one block per step, no collective, and n-1 steps where the ring takes 2(n-1).
#include "tests/exercises/ring_all_reduce/ring_all_reduce.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::Status RingAllReduce(dist::ProcessGroup& pg, Tensor& tensor) {
  const int n = pg.size(), rank = pg.rank();
  const int64_t len = tensor.numel();
  auto block = [&](int b) {
    b = ((b % n) + n) % n;
    return tensor.Rows(b * len / n, (b + 1) * len / n);
  };
  for (int s = 0; s < n - 1; ++s) {
    Tensor mine = block(rank - s - 2);
    Tensor arriving = Tensor::Empty({mine.numel()});
    RETURN_IF_ERROR(pg.BatchSendRecv({{dist::P2POp::Kind::kSend, block(rank - s - 1), (rank + 1) % n},
                                      {dist::P2POp::Kind::kRecv, arriving, (rank - 1 + n) % n}})->Wait());
    ops::AddInto(mine, arriving);
  }
  return absl::OkStatus();  // the all-gather is missing
}

}  // namespace tinyddp::exercises
