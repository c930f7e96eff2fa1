// The Reducer (dist/ddp/reducer.h): buckets, readiness, in-order launches, and the end-of-backward wait.
#include "dist/ddp/reducer.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/engine.h"
#include "autograd/node.h"
#include "dist/ddp/bucket_assignment.h"
#include "dist/process_group/collective_observer.h"  // CollectiveBucketScope
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::dist {
namespace {

constexpr char kOp[] = "DistributedDataParallel";

// True when `grad` is exactly `view`: the same bytes of the same storage.
bool IsView(const Tensor& grad, const Tensor& view) {
  return grad.defined() && grad.storage() == view.storage() && grad.byte_offset() == view.byte_offset();
}

// Names the step of DDP a collective's error came from: "all_reduce of bucket 2 failed on rank 1: ...".
absl::Status Annotate(const absl::Status& status, const std::string& what) {
  return absl::Status(status.code(), absl::StrCat(kOp, ": ", what, " failed: ", status.message()));
}

}  // namespace

Reducer::Reducer(std::vector<std::pair<std::string, autograd::Variable>> params, std::shared_ptr<ProcessGroup> pg,
                 const ReducerOptions& options, CommHook comm_hook)
    : pg_(std::move(pg)), options_(options), comm_hook_(comm_hook.run ? std::move(comm_hook) : AllReduceHook()) {
  for (auto& [name, p] : params) {
    if (!p.requires_grad()) continue;  // frozen parameters get no gradient, so they are not reduced
    params_.push_back(p);
    names_.push_back(name);
  }
  device_ = params_.empty() ? Device::CPU() : params_[0].device();
  for (size_t i = 0; i < params_.size(); ++i) {
    TINYDDP_CHECK_OP(params_[i].device() == device_, kOp, "parameter '", names_[i], "' is on ",
                     params_[i].device().ToString(), " but '", names_[0], "' is on ", device_.ToString(),
                     "; hint: move the whole module to this rank's device (Module::To) before wrapping it");
  }
  ready_.assign(params_.size(), false);
  had_grad_.assign(params_.size(), false);
  if (options_.bucket_order.empty()) {
    BuildBuckets(ReverseOrder(params_.size()));
  } else {  // a resumed run: the layout the run that wrote the checkpoint had (DDP checked the names)
    std::vector<size_t> order;
    for (const std::string& name : options_.bucket_order) {
      order.push_back(std::find(names_.begin(), names_.end(), name) - names_.begin());
    }
    BuildBuckets(order);
    rebuilt_ = true;
  }
  RegisterHooks();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].RemovePostAccumulateGradHook(hooks_[i]);
    if (options_.gradient_as_bucket_view) params_[i].set_grad_destination(Tensor());
  }
}

void Reducer::RegisterHooks() {
  hooks_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    // The hook captures the index, not the Variable: a leaf's hook must not own its leaf (engine.h).
    hooks_.push_back(params_[i].RegisterPostAccumulateGradHook([this, i](const autograd::Variable&) { MarkReady(i); }));
  }
}

// --- Buckets ---------------------------------------------------------------------------------------

void Reducer::BuildBuckets(const std::vector<size_t>& order) {
  std::vector<BucketParam> sizes(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    sizes[i] = {params_[i].numel() * static_cast<int64_t>(DTypeSize(params_[i].dtype())), params_[i].dtype()};
  }
  const std::vector<std::vector<size_t>> assignment =
      AssignBuckets(sizes, order, options_.first_bucket_bytes, options_.bucket_cap_bytes);

  std::vector<Bucket> buckets(assignment.size());
  locations_.assign(params_.size(), Location{});
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.params = assignment[b];
    bucket.dtype = params_[bucket.params[0]].dtype();
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      locations_[bucket.params[slot]] = Location{static_cast<int>(b), slot};
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += params_[bucket.params[slot]].numel();
    }
    bucket.grad_bucket.index = static_cast<int>(b);
    bucket.grad_bucket.numel = bucket.numel;
    bucket.grad_bucket.dtype = bucket.dtype;
    bucket.grad_bucket.is_last = b + 1 == assignment.size();
    bucket.grad_bucket.gradients.resize(bucket.params.size());
    for (size_t i : bucket.params) bucket.grad_bucket.parameters.push_back(params_[i]);
    if (!options_.gradient_as_bucket_view) continue;
    // One flat buffer; each parameter's gradient becomes a view into it. A gradient that already exists
    // (from an earlier bucket layout, or from before DDP) is copied in, so nothing is lost.
    const int64_t esize = static_cast<int64_t>(DTypeSize(bucket.dtype));
    const int64_t allocated = comm_hook_.padded_numel ? comm_hook_.padded_numel(bucket.numel, esize) : bucket.numel;
    TINYDDP_CHECK_OP(allocated >= bucket.numel, kOp, "the comm hook's padded_numel(", bucket.numel, ") returned ",
                     allocated);
    bucket.buffer = Tensor::Zeros({allocated}, bucket.dtype, device_);
    bucket.grad_bucket.buffer = bucket.buffer;
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const autograd::Variable& p = params_[bucket.params[slot]];
      const int64_t begin = bucket.offsets[slot];
      Tensor view = bucket.buffer.Rows(begin, begin + p.numel()).View(p.shape());
      if (p.grad().defined()) {
        ops::CopyInto(view, p.grad());
        p.set_grad(view);
      }
      // After ZeroGrad(set_to_none) the next gradient is written straight into the view (Linear's
      // weight gradient GEMM outputs there), instead of into a new tensor copied in by PlaceGradient.
      p.set_grad_destination(view);
      bucket.views.push_back(view);
      bucket.grad_bucket.gradients[slot] = view;
    }
  }
  buckets_ = std::move(buckets);
  layout_order_ = order;
  ++layout_generation_;
  // The hook's setup for this layout (CommHook::on_buckets_rebuilt): collective, like the build itself.
  if (comm_hook_.on_buckets_rebuilt && options_.gradient_as_bucket_view) {
    std::vector<Tensor> buffers;
    for (const Bucket& bucket : buckets_) buffers.push_back(bucket.buffer);
    if (const absl::Status s = comm_hook_.on_buckets_rebuilt(buffers); !s.ok()) {
      Fail(Annotate(s, "the comm hook's setup of the new buckets (on_buckets_rebuilt)"));
    }
  }
}

void Reducer::RebuildBucketsIfNeeded() {
  if (!rebuild_pending_) return;
  rebuild_pending_ = false;
  rebuilt_ = true;
  // Rank 0's observed order wins, so that every rank builds the same buckets even if their backwards
  // produced gradients in different orders.
  std::vector<int64_t> order64(ready_order_.begin(), ready_order_.end());
  Tensor order = Tensor::FromVector<int64_t>(order64, {static_cast<int64_t>(order64.size())}, device_);
  if (const absl::Status s = pg_->Broadcast(order, /*root=*/0)->Wait(); !s.ok()) {
    Fail(Annotate(s, "broadcasting rank 0's gradient order for the bucket rebuild"));
    return;
  }
  order64 = order.ToVector<int64_t>();
  const std::vector<size_t> observed(order64.begin(), order64.end());

  std::vector<std::vector<size_t>> current;
  for (const Bucket& bucket : buckets_) current.push_back(bucket.params);
  std::vector<BucketParam> sizes(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    sizes[i] = {params_[i].numel() * static_cast<int64_t>(DTypeSize(params_[i].dtype())), params_[i].dtype()};
  }
  if (AssignBuckets(sizes, observed, options_.first_bucket_bytes, options_.bucket_cap_bytes) == current) {
    layout_order_ = observed;  // the same buckets; LayoutOrder() reports the order they now stand for
    return;
  }
  BuildBuckets(observed);  // copies the current gradients into the new buffers
}

// --- One iteration ---------------------------------------------------------------------------------

void Reducer::PrepareForBackward(const autograd::Variable& output) {
  armed_ = true;
  finalize_queued_ = false;
  next_to_launch_ = 0;
  next_to_finish_ = 0;
  finish_stream_used_ = false;
  finished_in_backward_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  ready_order_.clear();
  launch_order_.clear();
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.finished = false;
  }
  unused_.clear();
  if (!options_.find_unused_parameters) return;

  // Walk the output's graph back to its leaves: a parameter whose AccumulateGrad is not reached gets no
  // gradient from this backward, so it is ready from the start (PyTorch marks them at the first hook).
  absl::flat_hash_set<const autograd::internal::VariableState*> reached;
  absl::flat_hash_set<const autograd::Node*> visited;
  std::vector<autograd::Node*> stack;
  if (output.defined() && output.grad_fn() != nullptr) {
    stack.push_back(output.grad_fn().get());
    visited.insert(stack.back());
  } else if (output.defined()) {
    reached.insert(output.state().get());  // the output is itself a leaf
  }
  while (!stack.empty()) {
    autograd::Node* node = stack.back();
    stack.pop_back();
    if (node->is_accumulator()) reached.insert(static_cast<autograd::AccumulateGrad*>(node)->leaf().get());
    for (const std::shared_ptr<autograd::Node>& next : node->next()) {
      if (next != nullptr && visited.insert(next.get()).second) stack.push_back(next.get());
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    had_grad_[i] = params_[i].grad().defined();
    if (!reached.contains(params_[i].state().get())) unused_.push_back(i);
  }
}

void Reducer::PrepareForLocalBackward() { armed_ = false; }

void Reducer::MarkReady(size_t param_index) {
  if (!armed_) return;  // a NoSync forward, or a module called without DDP: accumulate locally
  if (!finalize_queued_) {
    finalize_queued_ = true;
    autograd::QueueCallback([this] { FinalizeBackward(); });
    for (size_t unused : unused_) MarkParamReady(unused, /*unused=*/true);
  }
  MarkParamReady(param_index, /*unused=*/false);
  LaunchReadyBuckets();
}

void Reducer::MarkParamReady(size_t index, bool unused) {
  TINYDDP_CHECK_OP(!ready_[index], kOp, "parameter '", names_[index], "' was marked ready twice in one backward",
                   unused ? " (find_unused_parameters found it unused, yet its gradient hook ran)" : "",
                   "; hint: every parameter may produce one gradient per backward");
  ready_[index] = true;
  ready_order_.push_back(index);
  PlaceGradient(index, unused);
  --buckets_[locations_[index].bucket].pending;
}

void Reducer::PlaceGradient(size_t index, bool unused) {
  const autograd::Variable& p = params_[index];
  const Location loc = locations_[index];
  Bucket& bucket = buckets_[loc.bucket];
  const Tensor& grad = p.grad();
  if (options_.gradient_as_bucket_view) {
    Tensor& view = bucket.views[loc.slot];
    if (IsView(grad, view)) return;  // the common case: autograd accumulated straight into the bucket
    if (grad.defined()) {
      ops::CopyInto(view, grad);     // e.g. after ZeroGrad(set_to_none): autograd made a new tensor
    } else {
      ops::Fill(view, 0.0);          // an unused parameter without a gradient contributes zeros
    }
    p.set_grad(view);
    return;
  }
  if (!grad.defined()) {
    TINYDDP_CHECK_OP(unused, kOp, "parameter '", names_[index], "' is ready but has no gradient");
    p.set_grad(Tensor::Zeros(p.shape(), p.dtype(), p.device()));
  }
  bucket.grad_bucket.gradients[loc.slot] = p.grad();
}

void Reducer::LaunchReadyBuckets() {
  // Strictly in bucket order: a ready bucket waits for every earlier one, so all ranks issue the same
  // sequence of collectives whatever order their gradients arrived in.
  while (next_to_launch_ < num_buckets() && buckets_[next_to_launch_].pending == 0) {
    launch_order_.push_back(next_to_launch_);
    Launch(buckets_[next_to_launch_++]);
  }
  if (callback_timing_ == CallbackTiming::kInBackward) FinishLaunchedBuckets();
}

void Reducer::FinishLaunchedBuckets() {
  while (next_to_finish_ < next_to_launch_) {
    Bucket& bucket = buckets_[next_to_finish_];
    // The op that runs right after a bucket's hooks may still read its parameters' values (Linear's input
    // gradient, autograd/engine.h promise 7): an update must wait until backward has moved past it.
    if (autograd::OpsRunInBackward() <= bucket.launched_at_op) return;
    if (!device_.is_cuda()) {
      // CPU: Gloo's thread is still adding it up; waiting would stop backward. A later hook looks again.
      if (!bucket.future.work->IsCompleted()) return;
      Finish(bucket);
    } else {
      // GPU: the waits are stream events, so they cost the host nothing. The reducer's own stream waits for
      // what the compute stream has queued so far (that op included) and for the collective, and runs the
      // callback's kernels (the bucket's optimizer update) there, beside the rest of backward.
      if (finish_stream_.handle() == nullptr) {
        // The most urgent priority (CUDA clamps the number to the device's range): when GEMM blocks of
        // backward retire, the block scheduler starts the update's blocks first, so the updates do not
        // wait for every later GEMM of backward to have been scheduled.
        finish_stream_ = cuda::Stream::Create(device_.index, /*priority=*/-1000);
        finish_stream_done_ = std::make_unique<cuda::Event>();
      }
      finish_stream_done_->Record(cuda::Stream::Current(device_.index));
      finish_stream_.Wait(*finish_stream_done_);
      finish_stream_used_ = true;
      const cuda::Stream compute = cuda::Stream::SetCurrent(finish_stream_);
      Finish(bucket);
      cuda::Stream::SetCurrent(compute);
    }
    ++next_to_finish_;
    ++finished_in_backward_;
  }
}

void Reducer::Finish(Bucket& bucket) {
  bucket.finished = true;
  const absl::Status status = bucket.future.Complete();
  bucket.future = CommFuture{};  // drop the Work (and the tensors it holds)
  if (!status.ok()) {
    // A peer died, froze past the timeout, or the link broke: the gradients are not averages. Keep the
    // error for the training loop (status()), step nothing, and let the remaining futures drain.
    Fail(Annotate(status, absl::StrCat("all_reduce of bucket ", bucket.grad_bucket.index, " on rank ", pg_->rank())));
    return;
  }
  if (on_bucket_reduced_ && status_.ok()) Fail(on_bucket_reduced_(bucket.grad_bucket));
}

void Reducer::Launch(Bucket& bucket) {
  // The group's flight recorder files the hook's collectives under this bucket (what its analyzer names).
  CollectiveBucketScope scope(bucket.grad_bucket.index);
  bucket.launched_at_op = autograd::OpsRunInBackward();
  bucket.future = comm_hook_.run(*pg_, bucket.grad_bucket);
  TINYDDP_CHECK_OP(bucket.future.work != nullptr, kOp, "the comm hook returned no Work for bucket ",
                   bucket.grad_bucket.index, "; hint: a hook must return the collective it started");
}

void Reducer::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

void Reducer::FinalizeBackward() {
  armed_ = false;
  finalize_queued_ = false;
  if (next_to_launch_ < num_buckets()) {
    // Some bucket never became ready: name the parameters whose hooks never ran on this rank.
    std::vector<std::string> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(names_[i]);
    }
    TINYDDP_CHECK_OP(false, kOp, "backward finished on rank ", pg_->rank(), " but ", missing.size(),
                     " parameter(s) never received a gradient: ", absl::StrJoin(missing, ", "),
                     ". Their buckets could not be all-reduced, so the ranks' gradients would disagree. This "
                     "happens when the forward does not use every parameter in producing the loss. hint: pass "
                     "DdpOptions::find_unused_parameters=true (it finds them after each forward), or make every "
                     "parameter take part in the loss");
  }
  // Before the buckets complete, so that per-bucket callbacks (fused optimizers) see the final gradients.
  if (options_.find_unused_parameters) RestoreGloballyUnused();

  for (Bucket& bucket : buckets_) {
    if (!bucket.finished) Finish(bucket);  // kInBackward may have finished the first ones already
  }
  if (finish_stream_used_) {  // the step ends when the last update made during backward has
    finish_stream_done_->Record(finish_stream_);
    cuda::Stream::Current(device_.index).Wait(*finish_stream_done_);
    finish_stream_used_ = false;
  }
  if (!options_.gradient_as_bucket_view) {
    for (Bucket& bucket : buckets_) {
      for (Tensor& g : bucket.grad_bucket.gradients) g = Tensor();  // the parameters hold them
    }
  }

  // The first synchronised iteration records the real gradient order; the next Forward rebuilds from
  // it. Not with find_unused_parameters: the set of used parameters may change every iteration (PyTorch
  // does the same).
  if (options_.rebuild_buckets && !rebuilt_ && !options_.find_unused_parameters && num_synced_backwards_ == 0) {
    rebuild_pending_ = true;
  }
  ++num_synced_backwards_;
}

void Reducer::RestoreGloballyUnused() {
  // PyTorch keeps the gradient of a parameter that no rank used untouched: if it had none, it gets none,
  // so the optimizer skips it. That needs every rank's view: one small all_reduce(MAX) of a used map,
  // issued after every bucket was launched (the same position on every rank) and waited for on the host.
  std::vector<int32_t> used(params_.size(), 1);
  for (size_t i : unused_) used[i] = 0;
  Tensor map = Tensor::FromVector<int32_t>(used, {static_cast<int64_t>(used.size())}, device_);
  if (const absl::Status s = pg_->AllReduce(map, ReduceOp::kMax)->Wait(); !s.ok()) {
    Fail(Annotate(s, "exchanging the map of used parameters"));
    return;
  }
  used = map.ToVector<int32_t>();
  for (size_t i : unused_) {
    if (used[i] == 0 && !had_grad_[i]) params_[i].set_grad(Tensor());
  }
}

// --- Introspection -------------------------------------------------------------------------------

std::vector<std::vector<std::string>> Reducer::BucketParameterNames() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& bucket : buckets_) {
    names.emplace_back();
    for (size_t i : bucket.params) names.back().push_back(names_[i]);
  }
  return names;
}

std::vector<autograd::Variable> Reducer::BucketParameters(int b) const {
  std::vector<autograd::Variable> params;
  for (size_t i : buckets_.at(b).params) params.push_back(params_[i]);
  return params;
}

int64_t Reducer::BucketBytes(int b) const {
  const Bucket& bucket = buckets_.at(b);
  return bucket.numel * static_cast<int64_t>(DTypeSize(bucket.dtype));
}

std::vector<std::string> Reducer::Names(const std::vector<size_t>& indices) const {
  std::vector<std::string> names;
  for (size_t i : indices) names.push_back(names_[i]);
  return names;
}

std::vector<std::string> Reducer::LastReadyOrder() const { return Names(ready_order_); }

std::vector<std::string> Reducer::LayoutOrder() const {
  if (rebuild_pending_) return Names(ready_order_);  // what the next Forward rebuilds from (rank 0's wins)
  if (rebuilt_) return Names(layout_order_);
  return {};
}

}  // namespace tinyddp::dist
