// Exercise 3: make AllReduceBuckets (out_of_order.h) launch the buckets in a rank-dependent order, then run
//   ./bazelw test //tests/exercises/out_of_order:check
// As given it launches them in the same order on every rank, like DDP: correct, and so the check fails.
// Then read what TINYDDP_DISTRIBUTED_DEBUG=DETAIL reported (dist/observe/debug_check/debug_check.h) in the test
// log, and what happened without it.
#include "tests/exercises/out_of_order/out_of_order.h"

#include <memory>

namespace tinyddp::exercises {

absl::Status AllReduceBuckets(dist::ProcessGroup& pg, std::vector<Tensor>& buckets) {
  std::vector<std::shared_ptr<dist::Work>> works;
  for (Tensor& bucket : buckets) works.push_back(pg.AllReduce(bucket, dist::ReduceOp::kAvg));
  absl::Status first;
  for (const auto& work : works) first.Update(work->Wait());
  return first;
}

}  // namespace tinyddp::exercises
