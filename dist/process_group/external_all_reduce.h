// ExternalAllReduce: an all_reduce implemented outside a backend's own kernels that the group runs as one
// of its collectives (ProcessGroup::AllReduceExternal; ProcessGroupNCCL carries them, Gloo refuses). The
// group knows this interface, never an implementation (a wing has one: two GPUs' copy engines, which the
// copy-engine comm hook chooses per bucket; docs/design.md).
//
// What ProcessGroupNCCL does around an external call, exactly as around an NCCL call:
//   * it numbers the call, tells the observers (the debug check compares its "via <path>" across ranks)
//     and checks its arguments;
//   * it orders its stream after the caller's current stream before Enqueue, and keeps the tensors alive;
//   * its watchdog fails the Work after the group's timeout (or an NCCL error).
// What is the implementation's own, if it needs it, it does as a CollectiveObserver of the group: an
// implementation that leaves the group's stream before its call ended (so that its next call may start
// early) orders the group's other calls after that end when they are issued (Issued comes before a call
// is enqueued); one whose calls wait on a peer lets them go when the group aborts (Aborting), so that
// its streams stop waiting for a peer that will never come.
// No CUDA includes: streams and events are CUDA's opaque handles, declared below.
#ifndef TINYDDP_DIST_PROCESS_GROUP_EXTERNAL_ALL_REDUCE_H_
#define TINYDDP_DIST_PROCESS_GROUP_EXTERNAL_ALL_REDUCE_H_

#include <vector>

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace tinyddp::dist {

class ExternalAllReduce {
 public:
  virtual ~ExternalAllReduce() = default;

  /// The path's name, a string literal ("copy engines"): it ends the call's description ("AllReduce(...)
  /// #7 on nccl rank 0/2 via copy engines") and its debug fingerprint.
  virtual const char* path_name() const = 0;

  /// Host-side preparation of a call on `tensors` (CUDA tensors on the group's device, current), before
  /// anything is enqueued (e.g. growing a scratch area; it may block and talk to the peer). Called WITHOUT
  /// the group's lock, so the watchdog can abort meanwhile. An error fails the call; an `op` it does
  /// not support is InvalidArgument; an implementation that cannot be recorded into a CUDA graph refuses
  /// a capturing current stream here (FailedPrecondition): the group records whatever Enqueue issues.
  virtual absl::Status Prepare(const std::vector<Tensor>& tensors, ReduceOp op) = 0;

  /// Enqueues the all_reduce of `tensors` in place with `op`, starting on `stream` (the group's, already
  /// ordered after the caller's stream), and records `done` once the result is in place on this rank. It
  /// may leave `stream` before `done` (then it orders the group's later calls itself: the header comment).
  /// Called under the group's lock, after Prepare succeeded. An error means a half-enqueued call: the
  /// group aborts (every Work fails); InvalidArgument alone means nothing was enqueued.
  virtual absl::Status Enqueue(const std::vector<Tensor>& tensors, ReduceOp op, CUstream_st* stream,
                               CUevent_st* done) = 0;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_EXTERNAL_ALL_REDUCE_H_
