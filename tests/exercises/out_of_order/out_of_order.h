// Exercise 3 (docs/exercises.md): break DDP's one ordering rule on purpose and watch the debug mode
// catch it. DDP's reducer launches bucket k only after bucket k-1, on every rank (dist/ddp/reducer.h),
// because collectives are matched across ranks by their position: the n-th call of every rank is one
// collective. Here you write a launcher without that rule. out_of_order.cc is yours to write; reference/
// holds a solution, for after.
#ifndef TINYDDP_TESTS_EXERCISES_OUT_OF_ORDER_OUT_OF_ORDER_H_
#define TINYDDP_TESTS_EXERCISES_OUT_OF_ORDER_OUT_OF_ORDER_H_

#include <vector>

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::exercises {

/// Averages every tensor of `buckets` over the ranks, one pg.AllReduce(bucket, ReduceOp::kAvg) each,
/// launched one after the other and waited for at the end; returns the first error. The exercise: launch
/// them in an order that depends on the rank (say, odd ranks from the last bucket to the first), as a
/// reducer that launched buckets the moment they became ready could, when gradients arrive in different
/// orders on different ranks. Collective: every rank calls it with buckets of the same sizes.
absl::Status AllReduceBuckets(dist::ProcessGroup& pg, std::vector<Tensor>& buckets);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_OUT_OF_ORDER_OUT_OF_ORDER_H_
