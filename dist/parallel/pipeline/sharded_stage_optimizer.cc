// ZeRO-1 for a pipeline stage (sharded_stage_optimizer.h).
#include "dist/parallel/pipeline/sharded_stage_optimizer.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::dist::pipeline {

absl::StatusOr<std::unique_ptr<ShardedStageOptimizer>> ShardedStageOptimizer::Create(nn::Module& stage,
                                                                                     std::shared_ptr<ProcessGroup> data,
                                                                                     const Factory& factory) {
  if (data == nullptr) return absl::InvalidArgumentError("ShardedStageOptimizer: no data-parallel group");
  std::unique_ptr<ShardedStageOptimizer> z(new ShardedStageOptimizer(stage, std::move(data)));
  z->params_ = stage.Parameters();
  if (z->params_.empty()) return absl::InvalidArgumentError("ShardedStageOptimizer: the stage has no parameters");
  int64_t total = 0;
  for (const autograd::Variable& p : z->params_) {
    z->offsets_.push_back(total);
    total += p.numel();
  }
  const int64_t ranks = z->data_->size();
  z->block_ = (total + ranks - 1) / ranks;
  const Device device = z->params_[0].device();
  z->flat_params_ = Tensor::Zeros({z->block_ * ranks}, DType::kFloat32, device);
  z->flat_grads_ = Tensor::Zeros({z->block_ * ranks}, DType::kFloat32, device);
  z->block_grad_ = Tensor::Zeros({z->block_}, DType::kFloat32, device);
  for (size_t i = 0; i < z->params_.size(); ++i) {  // each parameter becomes a view into the flat buffer
    const autograd::Variable& p = z->params_[i];
    Tensor view = z->flat_params_.Rows(z->offsets_[i], z->offsets_[i] + p.numel()).View(p.shape());
    ops::CopyInto(view, p.data());
    p.set_data(view);
  }
  const int64_t begin = z->data_->rank() * z->block_;
  z->block_param_ = autograd::Variable(z->flat_params_.Rows(begin, begin + z->block_), /*requires_grad=*/true);
  z->block_optimizer_ = factory({z->block_param_});
  return z;
}

absl::Status ShardedStageOptimizer::Step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor slot = flat_grads_.Rows(offsets_[i], offsets_[i] + params_[i].numel()).View(params_[i].shape());
    ops::CopyInto(slot, params_[i].grad());
  }
  RETURN_IF_ERROR(data_->ReduceScatter(block_grad_, flat_grads_, ReduceOp::kAvg)->Wait());
  block_param_.set_grad(block_grad_);
  block_optimizer_->Step();
  const Tensor mine = block_param_.data().Clone();  // the gather's input apart from its output
  RETURN_IF_ERROR(data_->AllGather(flat_params_, mine)->Wait());
  stage_.RefreshComputeCopies();  // bf16: the copies cast from the gathered weights (fp32: nothing to do)
  return absl::OkStatus();
}

int64_t ShardedStageOptimizer::StateBytes() const {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : block_optimizer_->StateTensors()) {
    if (tensor.numel() > 1) bytes += static_cast<int64_t>(tensor.nbytes());
  }
  return bytes;
}

absl::StatusOr<nn::TensorMap> ShardedStageOptimizer::ConsolidatedStateTensors() {
  nn::TensorMap out;
  for (const auto& [key, tensor] : block_optimizer_->StateTensors()) {  // "state.0.<field>": every rank the same keys
    const std::string field = key.substr(std::string("state.0.").size());
    if (tensor.numel() != block_) {  // a scalar (Adam's step): the same on every rank
      for (size_t i = 0; i < params_.size(); ++i) out[absl::StrCat("state.", i, ".", field)] = tensor.Clone();
      continue;
    }
    Tensor whole = Tensor::Empty({block_ * data_->size()}, tensor.dtype(), tensor.device());
    RETURN_IF_ERROR(data_->AllGather(whole, tensor.Clone())->Wait());
    for (size_t i = 0; i < params_.size(); ++i) {
      out[absl::StrCat("state.", i, ".", field)] =
          whole.Rows(offsets_[i], offsets_[i] + params_[i].numel()).View(params_[i].shape()).Clone();
    }
  }
  return out;
}

absl::Status ShardedStageOptimizer::LoadConsolidatedStateTensors(const nn::TensorMap& state) {
  std::map<std::string, Tensor> flat;  // field -> the whole stage's flat state
  nn::TensorMap block;
  const int64_t begin = data_->rank() * block_;
  for (const auto& [key, tensor] : state) {
    std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('.', 2));
    size_t i = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &i) || i >= params_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ShardedStageOptimizer: no parameter for state '", key, "'"));
    }
    if (tensor.numel() != params_[i].numel()) {  // a scalar: the block's own
      block[absl::StrCat("state.0.", parts[2])] = tensor;
      continue;
    }
    auto [it, fresh] = flat.try_emplace(parts[2], Tensor());
    if (fresh) it->second = Tensor::Zeros({block_ * data_->size()}, DType::kFloat32, params_[0].device());
    Tensor slot = it->second.Rows(offsets_[i], offsets_[i] + params_[i].numel()).View(params_[i].shape());
    ops::CopyInto(slot, tensor.To(slot.device()));
  }
  for (const auto& [field, whole] : flat) block[absl::StrCat("state.0.", field)] = whole.Rows(begin, begin + block_);
  return block_optimizer_->LoadStateTensors(block);
}

}  // namespace tinyddp::dist::pipeline
