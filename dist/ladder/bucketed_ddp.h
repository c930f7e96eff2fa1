// BucketedDdp: the third rung of the DDP ladder (data_parallel.h; docs/ddp_ladder.md), where
// communication starts overlapping computation. Backward produces the last layer's gradients first; the
// moment a parameter's gradient is final, autograd calls its post-accumulate-grad hook (autograd/engine.h),
// which copies the gradient into its bucket. When a bucket has all its gradients it is all-reduced
// (ReduceOp::kAvg) right away - on the group's own thread (Gloo) or stream (NCCL) - while backward goes
// on computing the earlier layers. FinishBackward waits for the buckets and copies the averages back.
//
//   backward:  [grad L3][grad L2 ..........][grad L1 ..........]
//   comm:              [all_reduce bucket 0][all_reduce bucket 1]  [bucket 2]   <- only this tail is exposed
//
// Buckets, as torch's DDP forms them (bucket_assignment.h, the pure function the production Reducer uses):
// parameters in reverse registration order, a small first bucket (first_bucket_bytes) so communication
// starts early, then buckets of about bucket_cap_bytes. One bucket per tensor is naive_ddp.h with overlap;
// one bucket for everything is flat_ddp.h, launched from the last hook: no overlap at all.
//
// Order: a collective is matched across ranks by its position, so bucket k is launched only after bucket
// k-1, on every rank, even if its gradients happen to be ready first.
// What the production Reducer (dist/ddp/reducer.h, the full rung) adds: .grad as a view into the bucket (no
// copies: backward writes straight into it), re-bucketing in the order gradients really arrive, unused
// parameters, comm hooks, the end-of-backward wait queued inside autograd itself.
// Precondition: every trainable parameter gets a gradient in every synchronised backward (otherwise
// FinishBackward names the ones that did not). CPU (Gloo) and GPU (NCCL; streams ordered by the group).
// Not thread-safe: hooks run on the training thread, inside autograd::Backward.
#ifndef TINYDDP_DIST_LADDER_BUCKETED_DDP_H_
#define TINYDDP_DIST_LADDER_BUCKETED_DDP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ladder/comm_recorder.h"
#include "dist/ladder/data_parallel.h"
#include "dist/observe/trace/trace.h"
#include "nn/module.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::ladder {

class BucketedDdp : public DataParallel {
 public:
  /// Collective: starts every rank from rank 0's weights, forms the buckets (both limits > 0, in bytes)
  /// and registers one hook per trainable parameter. `module` must outlive the result; `tracer`
  /// (optional, not owned) records each bucket's all_reduce.
  static absl::StatusOr<std::unique_ptr<BucketedDdp>> Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                             int64_t first_bucket_bytes, int64_t bucket_cap_bytes,
                                                             Tracer* tracer = nullptr);
  /// Removes the hooks.
  ~BucketedDdp() override;

  /// Runs the module; `sync` arms the hooks for the backward that follows.
  autograd::Variable Forward(const autograd::Variable& input, bool sync = true) override;
  /// Waits for every bucket's all_reduce and copies the averages into .grad.
  absl::Status FinishBackward() override;
  std::string Describe() const override;
  std::vector<int64_t> AllReduceBytes() const override;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_, in the order their gradients are expected
    Tensor buffer;               // their gradients, end to end
    std::vector<Tensor> slices;  // slices[k]: params[k]'s place in buffer
    size_t pending = 0;          // gradients not yet copied in, this backward
    std::shared_ptr<Work> work;  // the all_reduce in flight
  };
  BucketedDdp(nn::Module& module, std::shared_ptr<ProcessGroup> pg, int64_t first_bucket_bytes,
              int64_t bucket_cap_bytes, Tracer* tracer);
  // The hook of parameter `i`: its gradient for this backward is final.
  void OnGradientReady(size_t i, const Tensor& grad);

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<autograd::Variable> params_;  // those that require grad
  std::vector<Bucket> buckets_;             // in launch order
  std::vector<size_t> bucket_of_, slot_of_;  // by parameter: its bucket and its place there
  std::vector<autograd::HookHandle> hooks_;
  CommRecorder comm_;  // pg_->AllReduce, plus a record on --trace's timeline
  // This backward.
  bool armed_ = false;
  std::vector<bool> ready_;  // by parameter
  size_t next_to_launch_ = 0;
};

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_LADDER_BUCKETED_DDP_H_
