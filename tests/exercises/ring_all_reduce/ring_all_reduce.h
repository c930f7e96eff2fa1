// Exercise 7 (docs/exercises.md): the ring all_reduce by hand, from point-to-point calls.
// docs/collectives.md draws the ring on three ranks: a reduce-scatter of n-1 steps, then an all-gather of
// n-1 steps, each step sending one block to the next rank and receiving one from the previous. Here you
// run it yourself with pg.BatchSendRecv (process_group.h). ring_all_reduce.cc is yours to write;
// reference/ holds a solution, for after.
#ifndef TINYDDP_TESTS_EXERCISES_RING_ALL_REDUCE_RING_ALL_REDUCE_H_
#define TINYDDP_TESTS_EXERCISES_RING_ALL_REDUCE_RING_ALL_REDUCE_H_

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::exercises {

/// Leaves the sum over all ranks of `tensor` in `tensor`, on every rank, by the ring: cut `tensor` into
/// pg.size() blocks (of sizes that differ by at most one: its length need not divide), then 2(n-1) steps,
/// in each of which this rank sends ONE block to rank (rank + 1) % n and receives one from rank
/// (rank - 1 + n) % n: n-1 steps that add the arriving block to this rank's copy (reduce-scatter), n-1 that
/// pass the finished blocks on (all-gather). Point-to-point calls only (Send, Recv, BatchSendRecv), no
/// collective. `tensor` is a 1-D float32 CPU tensor, the same length on every rank. Returns the first
/// error, if any. Every rank calls it.
absl::Status RingAllReduce(dist::ProcessGroup& pg, Tensor& tensor);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_RING_ALL_REDUCE_RING_ALL_REDUCE_H_
