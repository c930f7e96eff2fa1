// ZeroRedundancyOptimizer (dist/parallel/zero/zero_optimizer.h): attaching to DDP, the shards, the step and
// the all-gather. The state's consolidation for checkpoints is in zero_state.cc.
#include "dist/parallel/zero/zero_optimizer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "dist/parallel/zero/shard_state.h"
#include "tensor/ops.h"

namespace tinyddp::dist::zero {
namespace {

constexpr char kOp[] = "ZeroRedundancyOptimizer";

}  // namespace

std::string ShardMemory::ToString() const {
  const int64_t even = (parameters + world - 1) / world;
  return absl::StrFormat(
      "this rank steps %d of %d parameters (ceil(P/%d) = %d, + %d padding over all ranks); optimizer state %d "
      "bytes (unsharded, as in plain DDP: %d); master weights %d bytes%s",
      shard_elements, parameters, world, even, padding_elements, optimizer_state_bytes,
      unsharded_optimizer_state_bytes, master_weight_bytes,
      stage == 2 ? absl::StrFormat("; gradients %d bytes (its blocks; plain DDP: %d), at most %d more staged in "
                                   "backward", gradient_bytes, 4 * parameters, peak_staging_bytes)
                 : "");
}

absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> ZeroRedundancyOptimizer::Attach(
    DistributedDataParallel& ddp, OptimizerFactory factory, std::shared_ptr<GradientShards> gradients,
    ZeroOptions zero_options) {
  TINYDDP_CHECK_OP(factory != nullptr, kOp, "empty optimizer factory");
  const DdpOptions& options = ddp.options();
  const char* path = ddp.reducer().num_buckets() > 0 ? ddp.BucketPath(0) : "";
  const char* refused = nullptr;
  if (gradients == nullptr) {
    // ZeRO-1 cuts each flat bucket into padded blocks and steps a bucket's parameters together.
    refused = !options.gradient_as_bucket_view ? "gradient_as_bucket_view is off (no flat buckets)"
              : !options.comm_hook.padded_numel || std::strstr(path, "reduce_scatter") == nullptr ||
                      std::strstr(path, "to shards") != nullptr
                  ? "its comm hook is not ZeRO-1's (the buckets are not padded and reduce-scattered)"
                  : nullptr;
  } else {
    // ZeRO-2 keeps blocks of its own and no flat buckets.
    refused = options.gradient_as_bucket_view ? "gradient_as_bucket_view is on (ZeRO-2 keeps no flat buckets)"
              : std::strstr(path, "to shards") == nullptr ? "its comm hook is not ZeRO-2's (GradientShards::Hook)"
                                                          : nullptr;
  }
  if (refused == nullptr && options.find_unused_parameters) refused = "find_unused_parameters is on";
  if (refused == nullptr && ddp.has_bucket_reduced_callback()) {
    refused = "another optimizer wrapper (a fused optimizer) is attached to its backward";
  }
  if (refused != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZeRO-", gradients ? 2 : 1, " cannot attach to this DistributedDataParallel: ", refused, "; hint: create it with ",
        gradients ? "DdpOptions::comm_hook = shards->Hook(), gradient_as_bucket_view=false"
                  : "DdpOptions::comm_hook = zero::ReduceScatterHook(pg), gradient_as_bucket_view=true",
        " and find_unused_parameters=false, and register no fused optimizer (ZeRO is the optimizer)"));
  }
  std::unique_ptr<ZeroRedundancyOptimizer> zero(
      new ZeroRedundancyOptimizer(ddp, std::move(factory), std::move(gradients), zero_options));
  // The buckets as they are now (later ones arrive with the callback): each becomes a shard.
  for (int b = 0; b < ddp.reducer().num_buckets(); ++b) {
    zero->shards_.push_back(zero->MakeShard(ddp.reducer().grad_bucket(b)));
  }
  ZeroRedundancyOptimizer* self = zero.get();
  ddp.SetBucketReducedCallback([self](const GradBucket& bucket) { return self->OnBucketReduced(bucket); },
                               zero_options.in_backward ? Reducer::CallbackTiming::kInBackward
                                                        : Reducer::CallbackTiming::kAfterBackward);
  return zero;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp, OptimizerFactory factory,
                                                 std::shared_ptr<GradientShards> gradients, ZeroOptions options)
    : ddp_(ddp),
      pg_(ddp.process_group()),
      module_(ddp.module()),
      params_(ddp.module().NamedParameters()),
      factory_(std::move(factory)),
      gradients_(std::move(gradients)),
      options_(options) {}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  ddp_.SetBucketReducedCallback(nullptr);  // DDP steps nothing from now on
  // A gather still in flight writes into a flat buffer this object holds: let it finish first.
  for (Shard& s : shards_) {
    if (s.gather) s.gather->Wait().IgnoreError();
  }
}

ZeroRedundancyOptimizer::Shard ZeroRedundancyOptimizer::MakeShard(const GradBucket& bucket) {
  const int world = pg_.size(), rank = pg_.rank(), b = bucket.index;
  const std::vector<std::pair<autograd::Variable, Tensor>> copies = module_.ComputeCopies();  // bf16 only
  auto has_copy = [&](const autograd::Variable& p) {
    for (const auto& entry : copies) {
      if (entry.first.Is(p)) return true;
    }
    return false;
  };
  Shard s;
  s.bucket_params = bucket.parameters;
  const std::vector<autograd::Variable>& bucket_params = bucket.parameters;
  TINYDDP_CHECK_OP(!bucket_params.empty(), kOp, "bucket ", b, " lists no parameters");
  for (const autograd::Variable& p : bucket_params) {
    size_t index = 0;
    while (index < params_.size() && !params_[index].second.Is(p)) ++index;
    TINYDDP_CHECK_OP(index < params_.size(), kOp, "bucket ", b, " holds a parameter the module does not list");
    s.params.push_back(ParamSpan{index, s.numel, p.numel()});
    s.numel += p.numel();
  }
  // How large this rank's block is: ZeRO-1's block of the reducer's flat bucket (padded by
  // ReduceScatterHook's padded_numel), or ZeRO-2's own. The block itself is not held here: each step takes
  // it from the bucket the callback brings, so that buckets DDP dropped at its rebuild are freed at once.
  const Tensor& first = bucket_params[0].data();
  if (gradients_ != nullptr) {
    s.shard_numel = gradients_->ShardNumel(s.numel, static_cast<int64_t>(DTypeSize(first.dtype())));
  } else {
    const Tensor& grads = bucket.buffer;
    TINYDDP_CHECK_OP(grads.defined() && grads.numel() % world == 0 && grads.numel() >= s.numel, kOp, "bucket ", b,
                     " is not a flat buffer padded to whole blocks; hint: ZeRO-1 needs gradient_as_bucket_view and "
                     "DdpOptions::comm_hook = zero::ReduceScatterHook(pg)");
    s.shard_numel = grads.numel() / world;
    s.gradient_bytes = static_cast<int64_t>(grads.nbytes());
  }
  const int64_t padded = world * s.shard_numel;

  // The parameters move into one flat buffer laid out like their gradients: the all-gather then writes
  // them in place, and block `rank` of it is what this rank's optimizer steps. Their old storage goes back
  // to the allocator as they leave it (nothing else holds it): no second copy of the model.
  s.flat = Tensor::Zeros({padded}, first.dtype(), first.device());
  for (size_t i = 0; i < s.params.size(); ++i) {
    const autograd::Variable& p = bucket_params[i];
    Tensor view = s.flat.Rows(s.params[i].offset, s.params[i].offset + s.params[i].numel).View(p.shape());
    ops::CopyInto(view, p.data());
    p.set_data(view);
  }
  // bf16: the compute copies move into a bfloat16 buffer of the same layout, which the all-gather fills.
  const bool bf16 = has_copy(bucket_params[0]);
  if (bf16) s.copies = Tensor::Zeros({padded}, DType::kBFloat16, first.device());
  for (size_t i = 0; i < s.params.size(); ++i) {
    const autograd::Variable& p = bucket_params[i];
    TINYDDP_CHECK_OP(has_copy(p) == bf16, kOp, "parameters '", params_[s.params[0].index].first, "' and '",
                     params_[s.params[i].index].first, "' of bucket ", b, " differ in precision; hint: set the "
                     "precision of the whole model (Module::SetPrecision)");
    if (!bf16) continue;
    module_.SetComputeCopy(p, s.copies.Rows(s.params[i].offset, s.params[i].offset + s.params[i].numel)
                                  .View(p.shape()));
  }

  const int64_t begin = rank * s.shard_numel, end = begin + s.shard_numel;
  s.master = autograd::Variable(s.flat.Rows(begin, end), /*requires_grad=*/true, absl::StrCat("zero.bucket", b));
  s.optimizer = factory_({s.master});
  TINYDDP_CHECK_OP(s.optimizer != nullptr, kOp, "the optimizer factory returned null");
  // bf16: the step writes the block's compute copies in the same pass as its float32 masters.
  if (bf16) s.optimizer->SetComputeCopies({{s.master, s.copies.Rows(begin, end)}});
  if (lr_ >= 0) s.optimizer->set_lr(lr_);
  return s;
}

bool ZeroRedundancyOptimizer::Fits(int b, const GradBucket& bucket) const {
  if (b >= static_cast<int>(shards_.size())) return false;
  const Shard& s = shards_[b];
  if (s.bucket_params.size() != bucket.parameters.size()) return false;
  for (size_t i = 0; i < s.bucket_params.size(); ++i) {
    if (!s.bucket_params[i].Is(bucket.parameters[i])) return false;
  }
  return true;  // the same parameters in the same order: the same blocks (the gradients come with the bucket)
}

absl::Status ZeroRedundancyOptimizer::OnBucketReduced(const GradBucket& bucket) {
  if (!status_.ok()) return status_;  // the parameters already disagree across ranks: step nothing more
  // The reduction has completed (the current stream is ordered after it): the block holds the average.
  if (Fits(bucket.index, bucket)) {
    Step(bucket);
    if (!options_.in_backward) Gather(bucket.index);
  } else {
    deferred_.push_back(bucket);  // DDP rebuilt it: cut again at the last bucket, where every rank is alike
  }
  if (!bucket.is_last) return status_;

  // The last bucket: on every rank after every reduce-scatter of this backward, and (in backward too) at
  // its end, on the compute stream. On a GPU that stream first waits for the steps made on the side stream.
  if (stepped_in_backward_) {
    cuda::Stream::Current(pg_.device_index()).Wait(stepped_);
    stepped_in_backward_ = false;
  }
  Recut(bucket.index);
  if (options_.in_backward) {  // the all-gathers held back during backward, in bucket order
    for (size_t b = 0; b < shards_.size() && status_.ok(); ++b) Gather(static_cast<int>(b));
  }
  stepped_in_backward_ = false;
  // Whatever runs next on this stream (the next forward, an evaluation, a checkpoint) sees the new parameters.
  DrainGathers();
  return status_;
}

void ZeroRedundancyOptimizer::Step(const GradBucket& bucket) {
  Shard& s = shards_.at(bucket.index);
  // This rank's averaged block: of the reducer's flat bucket (ZeRO-1), or ZeRO-2's own.
  const Tensor block = gradients_ ? gradients_->Block(bucket.index, s.numel, s.flat.dtype(), s.flat.device())
                                  : bucket.buffer.Rows(pg_.rank() * s.shard_numel, (pg_.rank() + 1) * s.shard_numel);
  s.master.set_grad(block);
  s.optimizer->Step();
  s.master.set_grad(Tensor());
  // In backward on a GPU the step ran on the reducer's side stream: the all-gathers at the end wait for it.
  if (options_.in_backward && pg_.device_index() >= 0) {
    stepped_.Record(cuda::Stream::Current(pg_.device_index()));
    stepped_in_backward_ = true;
  }
}

void ZeroRedundancyOptimizer::Gather(int b) {
  Shard& s = shards_.at(b);
  // Every rank's new block to every rank, in place; the group's stream waits for the step's kernels first.
  // bf16: the compute copies travel (2 bytes an element); the float32 masters stay where they were stepped.
  if (s.copies.defined()) {
    const Tensor mine = s.copies.Rows(pg_.rank() * s.shard_numel, (pg_.rank() + 1) * s.shard_numel);
    s.gather = pg_.AllGather(s.copies, mine);
    masters_behind_ = true;
  } else {
    s.gather = pg_.AllGather(s.flat, s.master.data());
  }
}

void ZeroRedundancyOptimizer::Recut(int last) {
  // DDP rebuilt its buckets (once, after the first step; reducer.h): the buckets in deferred_ hold other
  // parameters than their shards. Their parameters come only from shards that no longer fit (a shard that
  // fits holds exactly its bucket's parameters), so only those shards' state is consolidated: collective,
  // the same shards on every rank, here at the last bucket where every rank issues it at the same point.
  std::vector<size_t> moving;  // old shards whose parameters move
  for (const GradBucket& d : deferred_) {
    if (d.index < static_cast<int>(shards_.size())) moving.push_back(d.index);
  }
  for (size_t k = last + 1; k < shards_.size(); ++k) moving.push_back(k);
  if (moving.empty() && deferred_.empty()) return;
  DrainGathers();
  if (const absl::Status s = GatherMasters(); !s.ok()) return Fail(s);  // bf16: the values the new shards copy
  // Shard by shard, each old optimizer dropped as soon as its state is gathered, so that the state is
  // held once (consolidated), not twice; each new shard then takes its parameters' part out of it.
  nn::TensorMap state;
  for (size_t k : moving) {
    absl::StatusOr<nn::TensorMap> gathered = GatherConsolidatedState(pg_, {StateOf(shards_[k])}, Params());
    if (!gathered.ok()) {
      return Fail(absl::Status(gathered.status().code(), absl::StrCat("ZeRO: re-sharding after DDP's bucket "
                                                                      "rebuild: ", gathered.status().message())));
    }
    state.merge(*gathered);
    shards_[k].optimizer.reset();
  }
  shards_.resize(last + 1);
  for (const GradBucket& bucket : deferred_) {
    Shard& s = shards_[bucket.index];
    s = MakeShard(bucket);
    nn::TensorMap mine;
    for (const ParamSpan& p : s.params) {
      const std::string prefix = absl::StrCat("state.", p.index, ".");
      for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0;) {
        mine.insert(*it);
        it = state.erase(it);
      }
    }
    const absl::Status loaded = ScatterConsolidatedState(pg_.rank(), {StateOf(s)}, Params(), mine);
    TINYDDP_CHECK_OP(loaded.ok(), kOp, "re-sharding after the bucket rebuild: ", loaded.ToString());  // our own
    Step(bucket);
    if (!options_.in_backward) Gather(bucket.index);
  }
  deferred_.clear();
}

void ZeroRedundancyOptimizer::DrainGathers() {
  for (size_t b = 0; b < shards_.size(); ++b) {
    Shard& s = shards_[b];
    if (s.gather == nullptr) continue;
    const absl::Status status = s.gather->SynchronizeStream();  // GPU: an event wait; CPU: waits for Gloo
    s.gather.reset();
    if (!status.ok()) {
      Fail(absl::Status(status.code(), absl::StrCat("ZeRO: all_gather of bucket ", b, "'s parameters on rank ",
                                                    pg_.rank(), ": ", status.message())));
    }
  }
}

void ZeroRedundancyOptimizer::Fail(const absl::Status& status) {
  if (status_.ok()) status_ = status;
}

absl::Status ZeroRedundancyOptimizer::GatherMasters() {
  if (!masters_behind_) return absl::OkStatus();
  for (size_t b = 0; b < shards_.size(); ++b) {
    const absl::Status s = pg_.AllGather(shards_[b].flat, shards_[b].master.data())->Wait();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("ZeRO: all_gather of bucket ", b, "'s float32 parameters on rank ",
                                                 pg_.rank(), ": ", s.message()));
    }
  }
  masters_behind_ = false;
  return absl::OkStatus();
}

void ZeroRedundancyOptimizer::SetLr(double lr) {
  lr_ = lr;
  for (Shard& s : shards_) s.optimizer->set_lr(lr);
}

ShardMemory ZeroRedundancyOptimizer::Memory() const {
  ShardMemory m;
  m.stage = gradients_ ? 2 : 1;
  m.world = pg_.size();
  for (size_t b = 0; b < shards_.size(); ++b) {
    const Shard& s = shards_[b];
    m.parameters += s.numel;
    m.shard_elements += s.shard_numel;
    m.master_weight_bytes += s.shard_numel * static_cast<int64_t>(DTypeSize(s.flat.dtype()));
    m.parameter_bytes += static_cast<int64_t>(s.flat.nbytes() + (s.copies.defined() ? s.copies.nbytes() : 0));
    m.gradient_bytes += s.gradient_bytes;
    int64_t state = 0;  // bytes of this shard's per-element state (scalars such as Adam's step left out)
    for (const auto& [name, t] : s.optimizer->StateTensors()) {
      if (t.dim() > 0) state += static_cast<int64_t>(t.nbytes());
    }
    m.optimizer_state_bytes += state;
    m.unsharded_optimizer_state_bytes += state / s.shard_numel * s.numel;
  }
  m.padding_elements = m.world * m.shard_elements - m.parameters;
  if (gradients_) {
    m.gradient_bytes = gradients_->block_bytes() + gradients_->staging_bytes();
    m.peak_staging_bytes = gradients_->peak_staging_bytes();
  }
  return m;
}

std::string ZeroRedundancyOptimizer::ShardTable() const {
  const bool bf16 = !shards_.empty() && shards_[0].copies.defined();
  std::string out = absl::StrFormat(
      "ZeRO-%d: each bucket is cut into %d equal blocks; rank r %ssteps block r, then all_gather returns the %s:\n",
      gradients_ ? 2 : 1, pg_.size(), gradients_ ? "keeps only its block of the gradients, " : "", bf16 ? "bfloat16 compute copies" : "parameters");
  if (std::string(pg_.backend_name()) == "nccl") {
    absl::StrAppend(&out, "  (reduce_scatter and all_gather run NCCL's kernels: the copy engines only all-reduce)\n");
  }
  for (size_t b = 0; b < shards_.size(); ++b) {
    const Shard& s = shards_[b];
    absl::StrAppendFormat(&out, "  bucket %d: %d elements = %d x %d (padding %d)\n", b, s.numel, pg_.size(),
                          s.shard_numel, pg_.size() * s.shard_numel - s.numel);
  }
  return out;
}

}  // namespace tinyddp::dist::zero
