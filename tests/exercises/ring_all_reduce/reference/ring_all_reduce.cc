// Exercise 7, a reference solution: docs/collectives.md's table, step by step.
#include "tests/exercises/ring_all_reduce/ring_all_reduce.h"

#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

absl::Status RingAllReduce(dist::ProcessGroup& pg, Tensor& tensor) {
  const int n = pg.size(), rank = pg.rank();
  const int64_t len = tensor.numel();
  const int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  // Block b (any integer, taken mod n): a view of the tensor, so what arrives lands in place.
  auto block = [&](int b) {
    b = ((b % n) + n) % n;
    return tensor.Rows(b * len / n, (b + 1) * len / n);
  };
  // One step: send block `out` to the next rank while block `in` arrives from the previous one, as one
  // batch (every rank sends first: issued apart, each Send would wait for a receiver that is sending).
  auto step = [&](int out, const Tensor& arriving) {
    return pg.BatchSendRecv({{dist::P2POp::Kind::kSend, block(out), next},
                             {dist::P2POp::Kind::kRecv, arriving, prev}})->Wait();
  };
  // Reduce-scatter: the running sum of block r - s - 1 goes right; the one that arrives gets our share.
  // After n-1 steps block `rank` has every rank's share.
  for (int s = 0; s < n - 1; ++s) {
    Tensor mine = block(rank - s - 2);
    Tensor arriving = Tensor::Empty({mine.numel()});
    RETURN_IF_ERROR(step(rank - s - 1, arriving));
    ops::AddInto(mine, arriving);
  }
  // All-gather: pass the finished blocks on, each received straight into its place.
  for (int s = 0; s < n - 1; ++s) RETURN_IF_ERROR(step(rank - s, block(rank - s - 1)));
  return absl::OkStatus();
}

}  // namespace tinyddp::exercises
