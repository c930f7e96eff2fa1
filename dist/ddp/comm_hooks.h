// Communication hooks: how the Reducer (dist/ddp/reducer.h) turns one bucket of local gradients into the
// average over ranks. PyTorch's DDP comm-hook interface (register_comm_hook) in C++: a hook receives the
// bucket's flat gradient buffer and the process group, starts a collective, and returns a CommFuture
// that the reducer completes at the end of backward. Besides, a hook names the path each bucket takes
// ("NCCL all_reduce", "copy engines"), for DDP's bucket table and the trace. Built-ins, as
// torch.distributed.algorithms.ddp_comm_hooks.default_hooks: a plain all_reduce (DDP's default), here, and bf16
// compression (bf16_compress_hook.h). Wings attach here too (docs/design.md): a hook that sends large buckets of two GPUs to the
// copy engines, one that wraps any hook to record it in a trace.
//
// Where things run: a hook is called inside backward, on the training thread, the moment its bucket is
// ready. Kernels it launches directly (a cast) run on the current (compute) stream; the collective runs
// on the process group's own stream (NCCL) or thread (Gloo). CommFuture::then runs at the end of
// backward, after the compute stream has been ordered after the collective, so kernels it launches see
// the collective's result without any host synchronisation.
#ifndef TINYDDP_DIST_DDP_COMM_HOOKS_H_
#define TINYDDP_DIST_DDP_COMM_HOOKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "autograd/variable.h"
#include "dist/process_group/process_group.h"
#include "dist/process_group/work.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

/// One bucket, as a hook sees it (torch.distributed.GradBucket). The reducer owns it; it stays valid,
/// at the same address, until the CommFuture returned for it has completed.
struct GradBucket {
  /// Position of the bucket in launch order (0 = the first bucket, launched first, on every rank).
  int index = 0;
  /// Elements and dtype of all its gradients together: the same on every rank (the buckets are), so a
  /// hook may choose its path from them and every rank chooses alike.
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  /// The bucket's gradients, flattened: a 1-D tensor whose slices are the parameters' .grad
  /// (gradient_as_bucket_view layout), followed by zeros when the hook asks for padding
  /// (CommHook::padded_numel). Undefined in the coalesced layout.
  Tensor buffer;
  /// The parameters' gradients, one tensor each, in bucket order: views into `buffer`, or in the coalesced
  /// layout the separate tensors autograd made (set when the bucket is launched). The hook must leave the
  /// averaged gradients in them (in `buffer`, when defined) by the time its CommFuture completes.
  std::vector<Tensor> gradients;
  /// The parameters whose gradients these are, in bucket order (GradBucket.parameters()): what an optimizer
  /// wrapper steps when the bucket's average has arrived (the bucket-reduced callback, reducer.h).
  std::vector<autograd::Variable> parameters;
  /// True for the last bucket of the backward.
  bool is_last = false;
};

/// A communication in flight (the future a PyTorch hook returns).
struct CommFuture {
  /// The collective; the reducer waits on it (SynchronizeStream on GPU, Wait on CPU).
  std::shared_ptr<Work> work;
  /// Optional: runs after the wait, on the training thread (GPU: launches on the current stream, which is
  /// then ordered after the collective). E.g. casting a bf16 result back into the float32 bucket.
  std::function<void()> then;

  /// Waits for `work` the cheap way for its device and runs `then`. Returns the collective's status.
  absl::Status Complete();
};

/// A hook (register_comm_hook's function, plus the name of its path).
struct CommHook {
  /// Starts communicating `bucket` on `pg` and returns at once.
  std::function<CommFuture(ProcessGroup& pg, GradBucket& bucket)> run;
  /// How `run` carries `bucket`: a string literal ("NCCL all_reduce", "copy engines") for DDP's bucket
  /// table and the trace. Must answer from what every rank shares (the group, the bucket's numel and
  /// dtype). Empty: "comm hook".
  std::function<const char*(const ProcessGroup& pg, const GradBucket& bucket)> path;
  /// Elements the flat bucket buffer must hold for `numel` gradient elements of `element_size` bytes
  /// (>= numel; a reduce-scatter hook, ZeRO-1's, pads to whole blocks per rank).
  /// The padding follows the gradients in the buffer and stays zero. The reducer asks it when it builds
  /// the buckets (gradient_as_bucket_view layout only). Empty: numel.
  std::function<int64_t(int64_t numel, int64_t element_size)> padded_numel;
  /// Optional: called by the Reducer each time it has (re)built its buckets (when it is made, and after
  /// the one-time rebuild in the second forward), on every rank at the same point, with the buckets' flat
  /// buffers in launch order; never during a backward. Not called in the coalesced layout
  /// (gradient_as_bucket_view = false: no flat buffers). A hook that keeps per-bucket state beside the
  /// group sets it up here; it may run collectives (the copy-engine hook pairs the buffers across ranks). An
  /// error becomes the reducer's status() (DDP's Create returns it).
  std::function<absl::Status(const std::vector<Tensor>& buffers)> on_buckets_rebuilt;

  /// path(pg, bucket), or "comm hook" when the hook has no path.
  const char* PathOf(const ProcessGroup& pg, const GradBucket& bucket) const;
};

/// The default: one all_reduce with ReduceOp::kAvg on the bucket in place (NCCL's native average, one
/// kernel; PyTorch instead divides by the world size and sums, which gives the same averages up to
/// rounding, identical on every rank either way). Path: AllReducePath(pg).
CommHook AllReduceHook();
/// AllReduceHook's function on its own (other hooks fall back to it).
CommFuture AllReduceBucket(ProcessGroup& pg, GradBucket& bucket);
/// "NCCL all_reduce", "Gloo all_reduce": the group's own all_reduce.
const char* AllReducePath(const ProcessGroup& pg);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_COMM_HOOKS_H_
