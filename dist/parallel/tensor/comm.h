// TensorParallelComm: the tp group as the tensor-parallel layers see it, a piece of the tensor-parallel wing
// (dist/parallel/tensor/). One all_reduce SUM at a time, waited for where it is needed, and the first failure
// kept for the training loop to see.
//
// Why a status and not an error return: the all_reduces run inside autograd (a forward op, and the backward
// of another), whose functions return Variables and gradients, not Status. So, as DistributedDataParallel
// does for a failed bucket (DistributedDataParallel::status()), the first failure is remembered here and the
// loop checks TensorParallelMlp::status() after every Backward. After a failure the values are not sums, and
// every later all_reduce of this object is skipped (it would wait out the group's timeout again on a dead
// peer): the loop must stop.
//
// Waiting: on the CPU (Gloo) Wait() blocks until the sum is there; on a GPU (NCCL) SynchronizeStream() makes
// the compute stream wait for the collective's stream, so the host does not block and the next kernel sees
// the sum. A tensor-parallel all_reduce sits on the critical path of the step either way: the next layer
// needs its result. That is why tensor parallelism wants the fastest link there is (NVLink, inside a node).
// Not thread-safe: the training thread, which defines the group's order of collectives.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_COMM_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_COMM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::tensor_parallel {

class TensorParallelComm {
 public:
  /// Precondition: `group` is not null.
  explicit TensorParallelComm(std::shared_ptr<ProcessGroup> group);

  ProcessGroup& group() const { return *group_; }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  /// Sums `t` over the group, in place, and orders what runs next on this thread after the sum (see the
  /// header comment). `layer` and `what` name the all_reduce in an error, which is composed only then (no
  /// string is built on the way of a step): "the all_reduce of layer 2's output (forward of g)". On a
  /// failure, now or earlier, `t` is left as it is (not a sum) and status() holds the first error.
  void AllReduceSum(Tensor& t, const std::string& layer, const char* what);

  /// OK, or the first failed all_reduce, naming it and the group's error.
  const absl::Status& status() const { return status_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  absl::Status status_;
};

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_COMM_H_
