// The optimizer step fused into DDP's backward (dist/accel/fused_optimizer/fused_optimizer.h).
#include "dist/accel/fused_optimizer/fused_optimizer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/check.h"

namespace tinyddp::dist {
namespace {

// "state.<i>.<field>" -> (i, field); false when malformed.
bool SplitStateName(const std::string& name, size_t* index, std::string* field) {
  const std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
  if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], index)) return false;
  *field = parts[2];
  return true;
}

// Position of `p` in `params` (params.size() when absent).
size_t IndexOf(const std::vector<autograd::Variable>& params, const autograd::Variable& p) {
  return std::find_if(params.begin(), params.end(), [&](const autograd::Variable& q) { return q.Is(p); }) -
         params.begin();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Attach(DistributedDataParallel& ddp, Factory factory,
                                                                        Options options) {
  if (factory == nullptr) return absl::InvalidArgumentError("FusedOptimizer: the optimizer factory is empty");
  if (ddp.options().find_unused_parameters) {
    return absl::InvalidArgumentError(
        "FusedOptimizer: DDP finds unused parameters, whose gradients are settled only at the end of backward "
        "(a parameter no rank used keeps no gradient, so the optimizer must skip it); hint: step a plain "
        "optimizer after backward, or build DDP with find_unused_parameters=false");
  }
  std::unique_ptr<FusedOptimizer> fused(new FusedOptimizer(ddp, std::move(factory), options));
  fused->Rebuild();
  FusedOptimizer* self = fused.get();
  ddp.SetBucketReducedCallback([self](const GradBucket& b) { return self->OnBucketReduced(b.index); },
                               options.in_backward ? Reducer::CallbackTiming::kInBackward
                                                   : Reducer::CallbackTiming::kAfterBackward);
  return fused;
}

FusedOptimizer::FusedOptimizer(DistributedDataParallel& ddp, Factory factory, Options options)
    : ddp_(ddp), factory_(std::move(factory)), options_(options) {}

FusedOptimizer::~FusedOptimizer() { ddp_.SetBucketReducedCallback(nullptr); }

absl::Status FusedOptimizer::OnBucketReduced(int b) {
  // DDP rebuilds its buckets once, in the forward after the first synchronised backward: follow it.
  if (generation_ != ddp_.reducer().layout_generation()) Rebuild();
  per_bucket_.at(b)->Step();
  return absl::OkStatus();
}

void FusedOptimizer::SetLr(double lr) {
  lr_ = lr;
  for (auto& opt : per_bucket_) opt->set_lr(lr);
}

void FusedOptimizer::UseDeviceLr(const Tensor& lr) {
  device_lr_ = lr;
  for (auto& opt : per_bucket_) opt->UseDeviceLr(lr);
}

void FusedOptimizer::Rebuild() {
  const Reducer& reducer = ddp_.reducer();
  // The state of the old layout, named over every parameter of the buckets, then split over the new one.
  std::vector<autograd::Variable> all;
  for (int b = 0; b < reducer.num_buckets(); ++b) {
    for (const autograd::Variable& p : reducer.BucketParameters(b)) all.push_back(p);
  }
  const nn::TensorMap state = StateTensorsOver(all);
  per_bucket_.clear();
  for (int b = 0; b < reducer.num_buckets(); ++b) {
    std::unique_ptr<nn::Optimizer> opt = factory_(reducer.BucketParameters(b));
    TINYDDP_CHECK_OP(opt != nullptr, "FusedOptimizer", "the factory returned no optimizer for bucket ", b);
    if (lr_ >= 0) opt->set_lr(lr_);
    if (device_lr_.defined()) opt->UseDeviceLr(device_lr_);
    per_bucket_.push_back(std::move(opt));
  }
  generation_ = reducer.layout_generation();
  const absl::Status moved = LoadStateTensorsOver(all, state);
  TINYDDP_CHECK_OP(moved.ok(), "FusedOptimizer", "moving optimizer state to the rebuilt buckets: ", moved.ToString());
}

nn::TensorMap FusedOptimizer::StateTensorsOver(const std::vector<autograd::Variable>& params) const {
  nn::TensorMap whole;
  for (const auto& opt : per_bucket_) {
    for (const auto& [name, tensor] : opt->StateTensors()) {
      size_t i = 0;
      std::string field;
      TINYDDP_CHECK_OP(SplitStateName(name, &i, &field) && i < opt->params().size(), "FusedOptimizer",
                       "unexpected optimizer state name '", name, "'");
      const size_t at = IndexOf(params, opt->params()[i]);
      TINYDDP_CHECK_OP(at < params.size(), "FusedOptimizer", "a bucket's parameter is not among the ",
                       params.size(), " parameters asked for; hint: pass every parameter of the model");
      whole[absl::StrCat("state.", at, ".", field)] = tensor;
    }
  }
  return whole;
}

absl::Status FusedOptimizer::LoadStateTensorsOver(const std::vector<autograd::Variable>& params,
                                                  const nn::TensorMap& state) {
  std::vector<nn::TensorMap> split(per_bucket_.size());
  for (const auto& [name, tensor] : state) {
    size_t at = 0;
    std::string field;
    if (!SplitStateName(name, &at, &field) || at >= params.size()) {
      return absl::InvalidArgumentError(absl::StrCat("FusedOptimizer: optimizer state '", name,
                                                     "' names no parameter of the ", params.size(), " given"));
    }
    bool placed = false;
    for (size_t b = 0; b < per_bucket_.size() && !placed; ++b) {
      const size_t i = IndexOf(per_bucket_[b]->params(), params[at]);
      if (i == per_bucket_[b]->params().size()) continue;
      split[b][absl::StrCat("state.", i, ".", field)] = tensor;
      placed = true;
    }
    if (!placed) {
      return absl::InvalidArgumentError(
          absl::StrCat("FusedOptimizer: optimizer state '", name, "' is for a parameter DDP does not train"));
    }
  }
  // All or nothing: check every bucket's part against a fresh optimizer before touching the live ones.
  for (size_t b = 0; b < per_bucket_.size(); ++b) {
    std::unique_ptr<nn::Optimizer> probe = factory_(per_bucket_[b]->params());
    if (absl::Status s = probe->LoadStateTensors(split[b]); !s.ok()) return s;
  }
  for (size_t b = 0; b < per_bucket_.size(); ++b) {
    if (absl::Status s = per_bucket_[b]->LoadStateTensors(split[b]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
