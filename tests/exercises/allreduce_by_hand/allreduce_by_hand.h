// Exercise 1 (docs/exercises.md): all_reduce built from the two collectives it is made of.
// docs/collectives.md explains why an all_reduce is a reduce-scatter followed by an all-gather; here you
// build one that way. allreduce_by_hand.cc is yours to write; reference/ holds a solution, for after.
#ifndef TINYDDP_TESTS_EXERCISES_ALLREDUCE_BY_HAND_ALLREDUCE_BY_HAND_H_
#define TINYDDP_TESTS_EXERCISES_ALLREDUCE_BY_HAND_ALLREDUCE_BY_HAND_H_

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::exercises {

/// Leaves the sum over all ranks of `tensor` in `tensor`, on every rank, using exactly two collectives:
/// one pg.ReduceScatter and one pg.AllGather (no AllReduce). `tensor` is a 1-D float32 CPU tensor of any
/// length, the same on every rank; its length need not be a multiple of pg.size(). Returns the first
/// collective's error, if any. Collective: every rank calls it.
absl::Status AllReduceByHand(dist::ProcessGroup& pg, Tensor& tensor);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_ALLREDUCE_BY_HAND_ALLREDUCE_BY_HAND_H_
