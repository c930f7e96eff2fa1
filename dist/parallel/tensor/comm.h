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
//
// Tracing (set_tracer; TensorParallelMlp::set_tracer sets it): each all_reduce on the trace's communication
// track, named after the op that issued it ("all_reduce (g)" in forward, "all_reduce (f)" in backward) with
// args.i the layer's position among the model's Linears, as FullyShardedDataParallel numbers its layers
// (tools/timeline labels them "g L1", "f L2"): on the CPU the interval Gloo's thread ran it, on a GPU two
// timing events on the group's stream. Also, for the layers' own spans, the backward part in progress
// (OpenBackwardPart): a layer's backward runs inside autograd's engine, between two marker ops of
// region_ops.h, not inside one C++ scope. Without a tracer nothing is recorded and nothing is allocated.
// Not thread-safe: the training thread, which defines the group's order of collectives.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_COMM_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_COMM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "dist/observe/trace/trace.h"
#include "dist/process_group/process_group.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::tensor_parallel {

/// The trace's names of the two all_reduces (tools/timeline/timeline_svg.cc knows them by these names).
inline constexpr char kForwardAllReduceName[] = "all_reduce (g)";   // a row layer's output, in forward
inline constexpr char kBackwardAllReduceName[] = "all_reduce (f)";  // a column layer's input gradient

/// A layer as the tp collectives name it: in errors by the Sequential's name ("layer 2"), in a trace by its
/// position among the model's Linears (1: the second Linear, which is the Sequential's child 2).
struct LayerLabel {
  std::string name;
  int64_t index = -1;
};

class TensorParallelComm {
 public:
  /// Precondition: `group` is not null.
  explicit TensorParallelComm(std::shared_ptr<ProcessGroup> group);

  ProcessGroup& group() const { return *group_; }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  /// Sums `t` over the group, in place, and orders what runs next on this thread after the sum (see the
  /// header comment). `layer` and `what` name the all_reduce in an error, which is composed only then (no
  /// string is built on the way of a step): "the all_reduce of layer 2's output (forward of g)". When
  /// tracing, the all_reduce is recorded as `trace_name` (a string literal) with args.i = layer.index. On a
  /// failure, now or earlier, `t` is left as it is (not a sum) and status() holds the first error.
  void AllReduceSum(Tensor& t, const LayerLabel& layer, const char* what, const char* trace_name);

  /// Records the all_reduces and the layers' compute into `tracer` (null: nothing); it must outlive this
  /// object, or be unset first.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  /// The tracer when one is set and enabled (Tracer::Active), else null: the check before recording.
  Tracer* tracer() const { return Tracer::Active(tracer_); }
  /// The backward of a layer as one span, "backward layer" (arg: `index`), from here until the next
  /// OpenBackwardPart, CloseBackwardPart or EndBackward. Called by region_ops.h's markers, in backward, only
  /// when tracing. Returns true for the first part of a backward: the caller then queues EndBackward at its
  /// end (autograd::QueueCallback), which closes the last part: a layer whose input needs no gradient (the
  /// data) has no marker of its own to close it.
  bool OpenBackwardPart(int64_t index);
  void CloseBackwardPart() { backward_part_.reset(); }
  void EndBackward();

  /// OK, or the first failed all_reduce, naming it and the group's error.
  const absl::Status& status() const { return status_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  absl::Status status_;
  Tracer* tracer_ = nullptr;
  std::unique_ptr<cuda::Event> fence_;           // tracing on a GPU: the group's stream after the compute stream
  std::optional<Tracer::Span> backward_part_;    // the layer whose backward is running, when tracing
  bool in_backward_ = false;                     // a part was opened since the last EndBackward
};

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_COMM_H_
