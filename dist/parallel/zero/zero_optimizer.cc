// ZeroRedundancyOptimizer (dist/parallel/zero/zero_optimizer.h): attaching to DDP, the shards, the step and
// the all-gather. The state's consolidation for checkpoints is in zero_state.cc.
#include "dist/parallel/zero/zero_optimizer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
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
    DistributedDataParallel& ddp, OptimizerFactory factory, std::shared_ptr<GradientShards> gradients) {
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
  if (gradients) gradients->Bind(ddp.reducer());  // the hook drops these parameters' gradients
  std::unique_ptr<ZeroRedundancyOptimizer> zero(new ZeroRedundancyOptimizer(ddp, std::move(factory), std::move(gradients)));
  ZeroRedundancyOptimizer* self = zero.get();
  ddp.SetBucketReducedCallback([self](int bucket) { return self->OnBucketReduced(bucket); });
  return zero;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp, OptimizerFactory factory,
                                                 std::shared_ptr<GradientShards> gradients)
    : ddp_(ddp),
      reducer_(ddp.reducer()),
      pg_(ddp.process_group()),
      module_(ddp.module()),
      params_(ddp.module().NamedParameters()),
      factory_(std::move(factory)),
      gradients_(std::move(gradients)) {
  Build();
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  ddp_.SetBucketReducedCallback(nullptr);  // DDP steps nothing from now on
  // A gather still in flight writes into a flat buffer this object holds: let it finish first.
  for (Shard& s : shards_) {
    if (s.gather) s.gather->Wait().IgnoreError();
  }
}

void ZeroRedundancyOptimizer::Build() {
  const int world = pg_.size(), rank = pg_.rank();
  const std::vector<std::pair<autograd::Variable, Tensor>> copies = module_.ComputeCopies();  // bf16 only
  auto has_copy = [&](const autograd::Variable& p) {
    for (const auto& entry : copies) {
      if (entry.first.Is(p)) return true;
    }
    return false;
  };
  std::vector<Shard> shards(reducer_.num_buckets());
  for (int b = 0; b < reducer_.num_buckets(); ++b) {
    Shard& s = shards[b];
    const std::vector<autograd::Variable> bucket_params = reducer_.BucketParameters(b);
    for (const autograd::Variable& p : bucket_params) {
      size_t index = 0;
      while (index < params_.size() && !params_[index].second.Is(p)) ++index;
      TINYDDP_CHECK_OP(index < params_.size(), kOp, "bucket ", b, " holds a parameter the module does not list");
      s.params.push_back(ParamSpan{index, s.numel, p.numel()});
      s.numel += p.numel();
    }
    // Where this rank's averaged block of the bucket arrives, and so how large a block is: ZeRO-1's block
    // of the reducer's flat bucket (padded by ReduceScatterHook's padded_numel), or ZeRO-2's own.
    const Tensor& first = bucket_params[0].data();
    Tensor grads;  // ZeRO-1: the flat gradient bucket
    if (gradients_ != nullptr) {
      s.shard_numel = gradients_->ShardNumel(s.numel, static_cast<int64_t>(DTypeSize(first.dtype())));
      s.grad_block = gradients_->Block(b, s.numel, first.dtype(), first.device());
    } else {
      grads = reducer_.BucketBuffer(b);
      TINYDDP_CHECK_OP(grads.defined() && grads.numel() % world == 0 && grads.numel() >= s.numel, kOp, "bucket ", b,
                       " is not a flat buffer padded to whole blocks; hint: ZeRO-1 needs gradient_as_bucket_view and "
                       "DdpOptions::comm_hook = zero::ReduceScatterHook(pg)");
      s.shard_numel = grads.numel() / world;
      s.grad_block = grads.Rows(rank * s.shard_numel, (rank + 1) * s.shard_numel);
    }
    const int64_t padded = world * s.shard_numel;

    // The parameters move into one flat buffer laid out like their gradients: the all-gather then writes
    // them in place, and block `rank` of it is what this rank's optimizer steps.
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
    s.master.set_grad(s.grad_block);
    s.optimizer = factory_({s.master});
    TINYDDP_CHECK_OP(s.optimizer != nullptr, kOp, "the optimizer factory returned null");
    // bf16: the step writes the block's compute copies in the same pass as its float32 masters.
    if (bf16) s.optimizer->SetComputeCopies({{s.master, s.copies.Rows(begin, end)}});
    if (lr_ >= 0) s.optimizer->set_lr(lr_);
  }
  shards_ = std::move(shards);
  generation_ = reducer_.layout_generation();
}

absl::Status ZeroRedundancyOptimizer::OnBucketReduced(int bucket) {
  ReshardIfRebuilt();  // the first backward after DDP's bucket rebuild: the shards follow, before any step
  if (!status_.ok()) return status_;  // the parameters already disagree across ranks: step nothing more
  Shard& s = shards_.at(bucket);
  // The reduce-scatter has completed (the current stream is ordered after it): grad_block is the average.
  s.optimizer->Step();
  // Every rank's new block to every rank, in place; the group's stream waits for the step's kernels first.
  // bf16: the compute copies travel (2 bytes an element); the float32 masters stay where they were stepped.
  if (s.copies.defined()) {
    const Tensor mine = s.copies.Rows(pg_.rank() * s.shard_numel, (pg_.rank() + 1) * s.shard_numel);
    s.gather = pg_.AllGather(s.copies, mine);
    masters_behind_ = true;
  } else {
    s.gather = pg_.AllGather(s.flat, s.master.data());
  }
  // After the last bucket: whatever runs next on this stream (the next forward, an evaluation, a
  // checkpoint) sees the new parameters.
  if (bucket + 1 == static_cast<int>(shards_.size())) DrainGathers();
  return status_;
}

void ZeroRedundancyOptimizer::DrainGathers() {
  for (size_t b = 0; b < shards_.size(); ++b) {
    Shard& s = shards_[b];
    if (s.gather == nullptr) continue;
    const absl::Status status = s.gather->SynchronizeStream();  // GPU: an event wait; CPU: waits for Gloo
    s.gather.reset();
    if (!status.ok()) {
      Fail(absl::Status(status.code(), absl::StrCat("ZeRO-1: all_gather of bucket ", b, "'s parameters on rank ",
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
      return absl::Status(s.code(), absl::StrCat("ZeRO-1: all_gather of bucket ", b, "'s float32 parameters on rank ",
                                                 pg_.rank(), ": ", s.message()));
    }
  }
  masters_behind_ = false;
  return absl::OkStatus();
}

void ZeroRedundancyOptimizer::ReshardIfRebuilt() {
  if (generation_ == reducer_.layout_generation() || !status_.ok()) return;
  // DDP rebuilt its buckets (once, after the first step; reducer.h): blocks now cut the buckets elsewhere,
  // so the parameters and the state are consolidated over the old layout and cut again over the new one.
  // Collective: every rank meets the new buckets at the same point (the end of the same backward, before
  // the first step, or a checkpoint's consolidation). The parameters hold the same values as at the
  // rebuild (nothing stepped them since), so the shards are what they would have been then.
  DrainGathers();  // left in flight only when a bucket's reduce-scatter failed and the steps stopped
  if (const absl::Status s = GatherMasters(); !s.ok()) {
    Fail(s);
    return;
  }
  absl::StatusOr<nn::TensorMap> state = GatherState();
  if (!state.ok()) {
    Fail(absl::Status(state.status().code(),
                      absl::StrCat("ZeRO-1: re-sharding after the bucket rebuild: ", state.status().message())));
    return;
  }
  Build();
  const absl::Status loaded = ScatterState(*state);
  TINYDDP_CHECK_OP(loaded.ok(), kOp, "re-sharding after the bucket rebuild: ", loaded.ToString());  // our own state
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
    if (!gradients_ && static_cast<int>(b) < reducer_.num_buckets()) m.gradient_bytes += static_cast<int64_t>(reducer_.BucketBuffer(static_cast<int>(b)).nbytes());
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
