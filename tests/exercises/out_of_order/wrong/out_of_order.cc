// Exercise 3, a known WRONG solution, kept so that CI proves the check rejects it
// (:rejects_wrong_solution). The ranks launch the buckets in the same order, but odd ranks sum where
// even ranks average. The debug mode reports a collective mismatch (AVG against SUM) and, without it,
// the results come out wrong: both symptoms the exercise asks for, from a different mistake. The check
// looks at what each rank issued and says so.
#include "tests/exercises/out_of_order/out_of_order.h"

#include <memory>

namespace tinyddp::exercises {

absl::Status AllReduceBuckets(dist::ProcessGroup& pg, std::vector<Tensor>& buckets) {
  std::vector<std::shared_ptr<dist::Work>> works;
  const dist::ReduceOp op = pg.rank() % 2 == 1 ? dist::ReduceOp::kSum : dist::ReduceOp::kAvg;
  for (Tensor& bucket : buckets) works.push_back(pg.AllReduce(bucket, op));
  absl::Status first;
  for (const auto& work : works) first.Update(work->Wait());
  return first;
}

}  // namespace tinyddp::exercises
