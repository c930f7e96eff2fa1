// BucketedDdp (dist/ladder/bucketed_ddp.h): buckets launched from gradient hooks, then one wait.
#include "dist/ladder/bucketed_ddp.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/ddp/bucket_assignment.h"
#include "tensor/ops.h"

namespace tinyddp::dist::ladder {

absl::StatusOr<std::unique_ptr<BucketedDdp>> BucketedDdp::Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                                 int64_t first_bucket_bytes, int64_t bucket_cap_bytes,
                                                                 Tracer* tracer) {
  if (first_bucket_bytes <= 0 || bucket_cap_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("bucketed DDP: bucket sizes must be positive, got first ",
                                                   first_bucket_bytes, " and cap ", bucket_cap_bytes, " bytes"));
  }
  RETURN_IF_ERROR(StartFromRankZero(*pg, module.NamedParameters()));
  return std::unique_ptr<BucketedDdp>(
      new BucketedDdp(module, std::move(pg), first_bucket_bytes, bucket_cap_bytes, tracer));
}

BucketedDdp::BucketedDdp(nn::Module& module, std::shared_ptr<ProcessGroup> pg, int64_t first_bucket_bytes,
                         int64_t bucket_cap_bytes, Tracer* tracer)
    : module_(module), pg_(std::move(pg)), params_(TrainableParameters(module.NamedParameters())),
      comm_(*pg_, tracer) {
  // Buckets in the order backward is expected to fill them: last layer first.
  std::vector<BucketParam> sizes;
  for (const autograd::Variable& p : params_) sizes.push_back({static_cast<int64_t>(p.data().nbytes()), p.dtype()});
  bucket_of_.resize(params_.size());
  slot_of_.resize(params_.size());
  for (const std::vector<size_t>& members :
       AssignBuckets(sizes, ReverseOrder(params_.size()), first_bucket_bytes, bucket_cap_bytes)) {
    Bucket& b = buckets_.emplace_back();
    b.params = members;
    int64_t numel = 0;
    for (size_t i : members) numel += params_[i].numel();
    b.buffer = Tensor::Empty({numel}, params_[members[0]].dtype(), params_[members[0]].device());
    int64_t offset = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      b.slices.push_back(b.buffer.Rows(offset, offset + params_[members[k]].numel()));
      offset += params_[members[k]].numel();
      bucket_of_[members[k]] = buckets_.size() - 1;
      slot_of_[members[k]] = k;
    }
  }
  // The seam: one hook per parameter. It captures the index, not the Variable (a hook must not own its
  // leaf); autograd passes the leaf in.
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].RegisterPostAccumulateGradHook(
        [this, i](const autograd::Variable& leaf) { OnGradientReady(i, leaf.grad()); }));
  }
}

BucketedDdp::~BucketedDdp() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].RemovePostAccumulateGradHook(hooks_[i]);
}

autograd::Variable BucketedDdp::Forward(const autograd::Variable& input, bool sync) {
  Tracer::Span span = Tracer::MaybeScope(comm_.tracer(), "forward");  // as DDP's own Forward does
  armed_ = sync;  // no_sync: the hooks stay quiet and gradients accumulate in .grad
  if (sync) {
    ready_.assign(params_.size(), false);
    for (Bucket& b : buckets_) b.pending = b.params.size();
    next_to_launch_ = 0;
  }
  return module_.Forward(input);
}

void BucketedDdp::OnGradientReady(size_t i, const Tensor& grad) {
  if (!armed_ || ready_[i]) return;
  ready_[i] = true;
  Bucket& bucket = buckets_[bucket_of_[i]];
  // On a GPU this copy is only queued on the compute stream, behind the kernels computing `grad`; the
  // group makes its NCCL stream wait for the compute stream before the all_reduce, so it reads the copy.
  ops::CopyInto(bucket.slices[slot_of_[i]], grad.Flatten());
  --bucket.pending;
  // Launch every bucket that is complete, strictly in bucket order (the same collectives, in the same
  // order, on every rank). kAvg: the backend divides by the number of ranks as it sums.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& next = buckets_[next_to_launch_];
    next.work = comm_.AllReduce(next.buffer, ReduceOp::kAvg, static_cast<int>(next_to_launch_));
    ++next_to_launch_;
  }
}

absl::Status BucketedDdp::FinishBackward() {
  if (!armed_) return absl::OkStatus();  // no_sync: nothing was sent
  armed_ = false;
  if (next_to_launch_ < buckets_.size()) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(params_[i].name());
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "bucketed DDP: backward produced no gradient for ", absl::StrJoin(missing, ", "), ", so bucket ",
        next_to_launch_, " was never sent and the ranks' collectives no longer match; hint: every parameter "
        "must take part in the loss (--ddp=full has find_unused_parameters for models where some do not)"));
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    // CPU: the thread waits for Gloo. GPU: the compute stream waits for the NCCL stream (an event, the
    // host goes on), so the copies below run after the average has arrived.
    const absl::Status status = bucket.work->SynchronizeStream();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("bucketed DDP: all_reduce of bucket ", b, " failed: ",
                                                      status.message()));
    }
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      Tensor grad = params_[bucket.params[k]].grad().Flatten();
      ops::CopyInto(grad, bucket.slices[k]);
    }
    bucket.work.reset();
  }
  comm_.Flush();
  return absl::OkStatus();
}

std::string BucketedDdp::Describe() const {
  std::string out = absl::StrFormat("bucketed DDP: %d bucket(s) all_reduced from gradient hooks during backward "
                                    "(%d ranks, %s), in launch order:",
                                    buckets_.size(), pg_->size(), pg_->backend_name());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<std::string> names;
    for (size_t i : buckets_[b].params) names.push_back(params_[i].name());
    absl::StrAppendFormat(&out, "\n  bucket %d: %d bytes: %s", b, buckets_[b].buffer.nbytes(), absl::StrJoin(names, ", "));
  }
  return out;
}

std::vector<int64_t> BucketedDdp::AllReduceBytes() const {
  std::vector<int64_t> bytes;
  for (const Bucket& b : buckets_) bytes.push_back(static_cast<int64_t>(b.buffer.nbytes()));
  return bytes;
}

}  // namespace tinyddp::dist::ladder
