// Exercise 3, a reference solution: odd ranks launch the buckets from the last to the first. With two
// ranks, collective #0 then averages rank 0's bucket 0 with rank 1's last bucket.
#include "tests/exercises/out_of_order/out_of_order.h"

#include <memory>

namespace tinyddp::exercises {

absl::Status AllReduceBuckets(dist::ProcessGroup& pg, std::vector<Tensor>& buckets) {
  std::vector<std::shared_ptr<dist::Work>> works;
  const int n = static_cast<int>(buckets.size());
  for (int i = 0; i < n; ++i) {
    const int k = pg.rank() % 2 == 1 ? n - 1 - i : i;
    works.push_back(pg.AllReduce(buckets[k], dist::ReduceOp::kAvg));
  }
  absl::Status first;
  for (const auto& work : works) first.Update(work->Wait());
  return first;
}

}  // namespace tinyddp::exercises
