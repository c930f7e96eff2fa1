// PipelineStage: the layer's forward and backward per microbatch, the transfers as point-to-point ops, and
// the one-process reference.
#include "tests/exercises/one_f_one_b/pipeline_stage.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "tensor/ops.h"

namespace tinyddp::exercises {

namespace {

nn::LinearOptions LayerOptions(int stage) {
  nn::LinearOptions options;
  options.seed = 8;
  options.rng_offset = stage * nn::Linear::NumRandomDraws(PipelineStage::kWidth, PipelineStage::kWidth, true);
  return options;
}

Tensor Random(int64_t rows, uint64_t seed, uint64_t offset) {
  Tensor t = Tensor::Empty({rows, PipelineStage::kWidth});
  ops::UniformInit(t, -1.0, 1.0, seed, offset);
  return t;
}

using Kind = dist::P2POp::Kind;

}  // namespace

PipelineStage::PipelineStage(dist::ProcessGroup& pg, int microbatches)
    : pg_(pg), microbatches_(microbatches), layer_(kWidth, kWidth, LayerOptions(pg.rank())) {}

Tensor PipelineStage::InputOf(int k) { return Random(kRows, 81, k * kRows * kWidth); }
Tensor PipelineStage::TargetOf(int k) { return Random(kRows, 82, k * kRows * kWidth); }

absl::Status PipelineStage::Forward(int k) {
  const std::string what = absl::StrCat("Forward(", k, ") on stage ", stage());
  if (alive_.count(k) > 0 || outputs_.count(k) > 0) return absl::FailedPreconditionError(what + ": done already");
  if (!is_first() && inputs_.count(k) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": microbatch ", k, "'s activation has not arrived (Communicate({stage.RecvActivation(", k, ")}) first)"));
  }
  Alive a;
  a.input = is_first() ? autograd::Variable(InputOf(k)) : autograd::Variable(inputs_[k], /*requires_grad=*/true);
  inputs_.erase(k);
  a.output = layer_.Forward(a.input);
  // Each microbatch's loss is 1/m of the whole batch's mean: the sum over microbatches is the batch's loss.
  if (is_last()) a.loss = autograd::Scale(autograd::MseLoss(a.output, autograd::Variable(TargetOf(k))), 1.0 / microbatches_);
  if (!is_last()) outputs_[k] = a.output.data();
  alive_[k] = std::move(a);
  peak_live_ = std::max(peak_live_, live());
  actions_.push_back(absl::StrCat("F", k));
  return absl::OkStatus();
}

absl::Status PipelineStage::Backward(int k) {
  const std::string what = absl::StrCat("Backward(", k, ") on stage ", stage());
  auto it = alive_.find(k);
  if (it == alive_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": microbatch ", k, " is not forwarded (Forward(", k, ") first)"));
  }
  if (!is_last() && output_grads_.count(k) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the gradient of microbatch ", k, " has not arrived (Communicate({stage.RecvGradient(", k, ")}) first)"));
  }
  if (is_last()) {
    autograd::Backward(it->second.loss);
  } else {
    autograd::Backward(it->second.output, output_grads_[k]);
    output_grads_.erase(k);
  }
  if (!is_first()) input_grads_[k] = it->second.input.grad();
  alive_.erase(it);  // the activations of k are freed here
  actions_.push_back(absl::StrCat("B", k));
  return absl::OkStatus();
}

std::vector<dist::P2POp> PipelineStage::RecvActivation(int k) {
  if (is_first()) return {};
  inputs_[k] = Tensor::Empty({kRows, kWidth});
  return {{Kind::kRecv, inputs_[k], stage() - 1, k}};
}

std::vector<dist::P2POp> PipelineStage::SendActivation(int k) {
  if (is_last()) return {};
  if (outputs_.count(k) == 0) {
    misuse_.Update(absl::FailedPreconditionError(absl::StrCat("SendActivation(", k, ") on stage ", stage(),
                                                              ": microbatch ", k, " is not forwarded yet")));
    return {};
  }
  dist::P2POp op{Kind::kSend, outputs_[k], stage() + 1, k};
  outputs_.erase(k);  // the op holds the tensor until it is sent
  return {op};
}

std::vector<dist::P2POp> PipelineStage::RecvGradient(int k) {
  if (is_last()) return {};
  output_grads_[k] = Tensor::Empty({kRows, kWidth});
  return {{Kind::kRecv, output_grads_[k], stage() + 1, k}};
}

std::vector<dist::P2POp> PipelineStage::SendGradient(int k) {
  if (is_first()) return {};
  if (input_grads_.count(k) == 0) {
    misuse_.Update(absl::FailedPreconditionError(absl::StrCat("SendGradient(", k, ") on stage ", stage(),
                                                              ": microbatch ", k, " is not backwarded yet")));
    return {};
  }
  dist::P2POp op{Kind::kSend, input_grads_[k], stage() - 1, k};
  input_grads_.erase(k);
  return {op};
}

absl::Status PipelineStage::Communicate(std::initializer_list<std::vector<dist::P2POp>> transfers) {
  if (!misuse_.ok()) return std::exchange(misuse_, absl::OkStatus());
  std::vector<dist::P2POp> ops;
  for (const auto& transfer : transfers) ops.insert(ops.end(), transfer.begin(), transfer.end());
  if (ops.empty()) return absl::OkStatus();
  return pg_.BatchSendRecv(std::move(ops))->Wait();
}

std::vector<std::vector<Tensor>> PipelineStage::ReferenceGradients(int stages, int microbatches) {
  std::vector<Tensor> inputs, targets;
  for (int k = 0; k < microbatches; ++k) {
    inputs.push_back(InputOf(k));
    targets.push_back(TargetOf(k));
  }
  auto concat = [&](const std::vector<Tensor>& parts) {
    Tensor all = Tensor::Empty({microbatches * kRows, kWidth});
    for (int k = 0; k < microbatches; ++k) {
      Tensor rows = all.Rows(k * kRows, (k + 1) * kRows);
      ops::CopyInto(rows, parts[k]);
    }
    return all;
  };
  std::vector<std::unique_ptr<nn::Linear>> layers;
  autograd::Variable x(concat(inputs));
  for (int s = 0; s < stages; ++s) {
    layers.push_back(std::make_unique<nn::Linear>(kWidth, kWidth, LayerOptions(s)));
    x = layers.back()->Forward(x);
  }
  autograd::Backward(autograd::MseLoss(x, autograd::Variable(concat(targets))));
  std::vector<std::vector<Tensor>> grads;
  for (const auto& layer : layers) grads.push_back({layer->weight().grad(), layer->bias().grad()});
  return grads;
}

}  // namespace tinyddp::exercises
