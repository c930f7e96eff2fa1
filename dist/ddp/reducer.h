// Reducer: the engine of DistributedDataParallel (dist/ddp/ddp.h). It groups the parameters' gradients into
// buckets and all-reduces each bucket the moment its last gradient is ready, while backward is still
// computing the gradients of earlier layers. PyTorch's c10d::Reducer, reduced to its ideas.
//
// One iteration, as seen from here:
//   Forward     DDP calls PrepareForBackward(output): the reducer is armed, every bucket expects all of
//               its parameters (with find_unused_parameters, those the output's graph does not reach are
//               found now and will count as ready).
//   Backward    autograd accumulates each parameter's gradient and calls its post-accumulate-grad hook
//               (autograd/engine.h): MarkReady(param). When a bucket has no pending parameter left it is
//               launched through the comm hook (comm_hooks.h) - but only in bucket order: bucket k goes
//               after bucket k-1 has gone, on every rank, so all ranks issue the same collectives in the
//               same order (a collective is matched across ranks by its position). The first hook also
//               queues FinalizeBackward with autograd::QueueCallback.
//   End         FinalizeBackward (end of autograd::Backward): every bucket must have been launched,
//               otherwise some parameter never got a gradient, and the program stops naming it and the
//               option that fixes it. Then each bucket's CommFuture is completed: on GPU the compute
//               stream waits for the NCCL stream (an event, no host blocking), on CPU the thread waits for
//               Gloo. When Backward returns, every .grad holds the average over ranks.
//
// Buckets. Parameters that require grad are assigned by size (bucket_assignment.h), first in reverse
// registration order; after the first synchronised iteration they are re-assigned once in the order
// gradients actually arrived on rank 0 (broadcast, so every rank agrees). Two layouts:
//   gradient_as_bucket_view = true (default, PyTorch's gradient_as_bucket_view=True): each bucket is one
//     flat buffer and each parameter's .grad is a view into it, so autograd accumulates straight into
//     the bucket and the all_reduce works in place on one contiguous message. Each view is also its
//     parameter's gradient destination (Variable::set_grad_destination): after ZeroGrad(set_to_none)
//     Linear's weight-gradient GEMM writes into the view itself. A gradient that is still not the view
//     when its hook runs (the user set another tensor) is copied into the view and re-pointed at it.
//   gradient_as_bucket_view = false: gradients stay the tensors autograd made; a bucket is all-reduced
//     as one coalesced collective over them (an NCCL group / Gloo's flattening): no copy at all on GPU.
//
// Streams: hooks run on the training thread while autograd's kernels are only enqueued on the current
// (compute) stream; ProcessGroupNCCL makes its stream wait for the compute stream before each
// collective, so the all_reduce reads finished gradients. Nothing here synchronises the device or the
// host during a step, and after the first iteration nothing allocates (buffers, views and the GradBucket
// records are made once), except with find_unused_parameters (a graph walk and a used-map exchange).
// Not thread-safe: the training thread only.
#ifndef TINYDDP_DIST_DDP_REDUCER_H_
#define TINYDDP_DIST_DDP_REDUCER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "autograd/variable.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/process_group/process_group.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

/// How the reducer buckets and launches; DdpOptions (ddp.h) is these plus what DDP itself adds.
struct ReducerOptions {
  /// Largest bucket, in bytes of gradient (PyTorch's bucket_cap_mb = 25). A parameter larger than the cap
  /// gets a bucket of its own.
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  /// Cap of the first bucket (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB): the last layer's
  /// gradients are ready first, and a small first bucket starts communication early in backward.
  int64_t first_bucket_bytes = int64_t{1} << 20;
  /// true (PyTorch's gradient_as_bucket_view=True): each .grad is a view into its bucket's flat buffer and
  /// the bucket is all-reduced as one message. false: gradients stay autograd's own tensors and each bucket
  /// is all-reduced as one coalesced collective over them, which copies nothing on GPU even when the
  /// training loop clears gradients with set_to_none. Both leave the average in every .grad.
  bool gradient_as_bucket_view = true;
  /// Detect parameters the forward did not use and treat them as ready (costs a graph walk per Forward).
  bool find_unused_parameters = false;
  /// After the first synchronised backward, re-bucket the parameters in the order their gradients were
  /// actually produced (rank 0's order, shared with every rank), as PyTorch does.
  bool rebuild_buckets = true;
  /// Resuming: the layout a checkpoint recorded (Reducer::LayoutOrder() of the run that wrote it, dotted
  /// names). Non-empty: the buckets are built in this order from the start and count as rebuilt, so the
  /// resumed run's first step puts every gradient element at the bucket offset the uninterrupted run puts
  /// it at. Why that matters: a ring all_reduce adds an element in an order set by the ring chunk its
  /// offset falls in, so at 3+ ranks a moved element rounds differently (docs/exactness.md). Every rank
  /// passes the same list, a permutation of the trainable parameters' names (DDP checks it).
  std::vector<std::string> bucket_order;
};

class Reducer {
 public:
  /// Takes the (dotted name, parameter) list of a module; the parameters that require grad are bucketed
  /// and get a hook each. `comm_hook` communicates each bucket (empty: AllReduceHook); its
  /// on_buckets_rebuilt, if any, runs after every build of the buckets, this first one included (a failure
  /// becomes status()). Preconditions: all parameters on one device, which `pg` accepts; `pg` is the same
  /// group on every rank and every rank passes the same list (DDP verifies it first).
  Reducer(std::vector<std::pair<std::string, autograd::Variable>> params, std::shared_ptr<ProcessGroup> pg,
          const ReducerOptions& options, CommHook comm_hook);
  /// Removes the hooks and the gradient destinations. Gradients that are bucket views keep the bucket
  /// memory alive.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Called by DDP's Forward outside NoSync, before the module runs: performs the one-time bucket rebuild
  /// when the first iteration has recorded an order (a collective: rank 0's order is broadcast).
  void RebuildBucketsIfNeeded();
  /// Arms the reducer for the next backward (after the module ran). With find_unused_parameters, walks
  /// `output`'s graph to find the parameters it does not reach.
  void PrepareForBackward(const autograd::Variable& output);
  /// Disarms: the next backward accumulates locally and communicates nothing (DDP's NoSync forward).
  void PrepareForLocalBackward();
  /// When the bucket-reduced callback runs (SetBucketReducedCallback).
  enum class CallbackTiming {
    /// At the end of each synchronised backward, once per bucket in launch order, right after that bucket's
    /// average has arrived on the current stream, while later buckets may still be in flight.
    kAfterBackward,
    /// Already during backward, once per bucket in launch order, as soon as (1) backward has run the op after
    /// the one that completed the bucket (which may still read its parameters: autograd/engine.h promise 7)
    /// and (2) its average can be waited for without blocking the host. On a GPU that is the next gradient
    /// hook: the callback runs on a stream of the reducer's own, which waits for the compute stream so far
    /// and for the collective, so its kernels run beside the rest of backward (the compute stream waits for
    /// that stream at the end of backward). On a CPU, the first hook at which the collective has finished
    /// (Work::IsCompleted). The rest at the end of backward. Its timing may differ across ranks: such a
    /// callback must not issue collectives, except for the last bucket's, always run at the end of backward.
    kInBackward,
  };
  /// Called once per bucket of each synchronised backward, when `timing` says, right after that bucket's
  /// average has arrived (the current stream is ordered after its collective), with the bucket as the comm
  /// hook saw it (index, parameters, buffer: all a wrapper needs, so none holds the reducer). Optimizer
  /// wrappers step there (the fused optimizer, ZeRO: wings). An error it returns becomes status(), and no
  /// further callback runs. Empty: nothing.
  void SetBucketReducedCallback(std::function<absl::Status(const GradBucket& bucket)> callback,
                                CallbackTiming timing = CallbackTiming::kAfterBackward) {
    on_bucket_reduced_ = std::move(callback);
    callback_timing_ = timing;
  }

  /// OK, or the first communication error (a bucket's all_reduce, the rebuild's broadcast, the used-map
  /// exchange, a per-bucket callback's own collectives) since construction: a peer that died or froze past
  /// the group's timeout, a broken link. Once set, the gradients of that backward are not averages and
  /// per-bucket callbacks no longer run; the training loop must stop (DistributedDataParallel::status()).
  /// PyTorch raises from backward().
  const absl::Status& status() const { return status_; }

  // --- Introspection (tests, docs, logs) --------------------------------------------------------------
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  /// Dotted names of the parameters of each bucket, in launch order.
  std::vector<std::vector<std::string>> BucketParameterNames() const;
  /// The parameters of bucket `b`, in bucket order.
  std::vector<autograd::Variable> BucketParameters(int b) const;
  /// Increases whenever the buckets are (re)built, so holders of per-bucket state know to rebuild theirs.
  int64_t layout_generation() const { return layout_generation_; }
  /// Bytes of gradient in bucket `b`.
  int64_t BucketBytes(int b) const;
  /// The flat buffer of bucket `b`, padding included (undefined when gradient_as_bucket_view is false).
  const Tensor& BucketBuffer(int b) const { return buckets_.at(b).buffer; }
  /// Bucket `b` as the comm hook sees it (index, numel, dtype, buffer).
  const GradBucket& grad_bucket(int b) const { return buckets_.at(b).grad_bucket; }
  /// The hook that communicates the buckets.
  const CommHook& comm_hook() const { return comm_hook_; }
  /// Bucket indices in the order the last synchronised backward launched them.
  const std::vector<int>& last_launch_order() const { return launch_order_; }
  /// Parameter names in the order their gradients became ready in the last synchronised backward.
  std::vector<std::string> LastReadyOrder() const;
  /// True once the buckets were rebuilt from the observed order (or built from ReducerOptions::bucket_order).
  bool buckets_rebuilt() const { return rebuilt_; }
  /// What a checkpoint records so that a resumed run continues with the same buckets: the gradient order
  /// (dotted names) the next synchronised backward's buckets are built from. After the first synchronised
  /// backward that is this rank's observed order (the rebuild broadcasts rank 0's, so ask rank 0), after the
  /// rebuild the order it used; empty while no rebuild has been recorded (the next run starts as a fresh one
  /// would) or when the buckets never rebuild (rebuild_buckets false, find_unused_parameters).
  std::vector<std::string> LayoutOrder() const;
  /// Number of backwards that all-reduced.
  int64_t num_synced_backwards() const { return num_synced_backwards_; }
  /// CallbackTiming::kInBackward: how many buckets of the last synchronised backward were finished (their
  /// callback run) before its end; the others were finished at the end.
  int buckets_finished_in_backward() const { return finished_in_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_, in gradient order
    std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
    int64_t numel = 0;
    DType dtype = DType::kFloat32;
    Tensor buffer;              // flat gradients (view layout only)
    std::vector<Tensor> views;  // views[i]: params[i]'s slice of buffer, shaped like the parameter
    GradBucket grad_bucket;     // what the comm hook sees; gradients are refreshed at launch
    // Per backward.
    size_t pending = 0;
    CommFuture future;
    bool finished = false;  // its future completed and its callback run
    int64_t launched_at_op = 0;  // autograd::OpsRunInBackward() when it was launched
  };
  struct Location {
    int bucket = -1;
    size_t slot = 0;
  };

  void BuildBuckets(const std::vector<size_t>& order);
  void RegisterHooks();
  // The hook: param_index's gradient is final for this backward.
  void MarkReady(size_t param_index);
  // Records one parameter as ready (its gradient placed, its bucket's pending count decremented).
  void MarkParamReady(size_t param_index, bool unused);
  // Puts the parameter's gradient where its bucket needs it (view layout: copied in and re-pointed if it
  // is not already the view; a missing gradient of an unused parameter becomes zeros).
  void PlaceGradient(size_t param_index, bool unused);
  void LaunchReadyBuckets();
  void Launch(Bucket& bucket);
  // Completes the bucket's future (on the current stream) and runs the bucket-reduced callback.
  void Finish(Bucket& bucket);
  // CallbackTiming::kInBackward: finishes the launched buckets, in order, that need no host wait.
  void FinishLaunchedBuckets();
  void FinalizeBackward();
  // find_unused_parameters: parameters whose gradient stayed undefined on every rank keep no gradient.
  void RestoreGloballyUnused();

  std::vector<autograd::Variable> params_;  // only those that require grad
  std::vector<std::string> names_;
  std::vector<std::string> Names(const std::vector<size_t>& indices) const;
  std::shared_ptr<ProcessGroup> pg_;
  const ReducerOptions options_;
  const CommHook comm_hook_;
  Device device_;
  std::vector<Bucket> buckets_;
  std::vector<Location> locations_;  // by parameter index
  std::vector<autograd::HookHandle> hooks_;

  // Per-backward state.
  bool armed_ = false;               // hooks act only after PrepareForBackward
  bool finalize_queued_ = false;
  int next_to_launch_ = 0;           // buckets launch strictly in order
  int next_to_finish_ = 0;           // and finish in the same order
  std::vector<bool> ready_;          // by parameter index
  std::vector<size_t> unused_;       // parameters the forward did not reach (find_unused_parameters)
  std::vector<bool> had_grad_;       // find_unused_parameters: .grad was defined before this backward
  std::vector<int> launch_order_;
  std::vector<size_t> ready_order_;  // parameter indices in ready order

  // Rebuild: recorded during the first synchronised backward, applied at the next Forward.
  std::vector<size_t> layout_order_;  // the order the current buckets were built from
  bool rebuilt_ = false;
  bool rebuild_pending_ = false;
  int64_t num_synced_backwards_ = 0;
  absl::Status status_;  // the first communication error (status())
  void Fail(absl::Status status);
  int64_t layout_generation_ = 0;
  std::function<absl::Status(const GradBucket&)> on_bucket_reduced_;
  CallbackTiming callback_timing_ = CallbackTiming::kAfterBackward;
  cuda::Stream finish_stream_;   // kInBackward on a GPU: where buckets finish during backward (made once)
  std::unique_ptr<cuda::Event> finish_stream_done_;
  bool finish_stream_used_ = false;  // in this backward
  int finished_in_backward_ = 0;     // in the last synchronised backward
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_REDUCER_H_
