// One rank's step of a pipeline schedule (pipeline_runtime.h).
#include "dist/parallel/pipeline/pipeline_runtime.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd/engine.h"
#include "autograd/weight_grad_deferral.h"
#include "base/status_macros.h"
#include "dist/parallel/zero/memory_table.h"
#include "tensor/ops.h"

namespace tinyddp::dist::pipeline {

using autograd::Variable;

absl::StatusOr<std::vector<Microbatch>> SplitBatch(const Tensor& inputs, const Tensor& labels, int m) {
  const int64_t rows = inputs.size(0);
  if (m < 1 || rows < m) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--microbatches=%d: a batch of %d rows cannot be cut into %d microbatches; use --microbatches <= %d or a "
        "larger --batch_size", m, rows, m, rows));
  }
  std::vector<Microbatch> out;
  int64_t begin = 0;
  for (int k = 0; k < m; ++k) {
    const int64_t end = begin + rows / m + (k < rows % m ? 1 : 0);
    out.push_back({inputs.Rows(begin, end), labels.Rows(begin, end),
                   static_cast<double>(end - begin) / static_cast<double>(rows)});
    begin = end;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PipelineRuntime>> PipelineRuntime::Create(
    PipelineSchedule schedule, std::shared_ptr<ProcessGroup> group, std::vector<std::shared_ptr<PipelineStage>> stages,
    LossFn loss) {
  const int p = schedule.num_ranks();
  if (p > 1 && (group == nullptr || group->size() != p)) {
    return absl::InvalidArgumentError(absl::StrCat("PipelineRuntime: a schedule of ", p, " ranks needs a pipeline "
                                                   "group of ", p, " ranks, got ",
                                                   group == nullptr ? "none" : absl::StrCat(group->size())));
  }
  if (static_cast<int>(stages.size()) != schedule.options.virtual_stages) {
    return absl::InvalidArgumentError(absl::StrCat("PipelineRuntime: the schedule gives each rank ",
                                                   schedule.options.virtual_stages, " stage(s), got ", stages.size()));
  }
  RETURN_IF_ERROR(ValidateSchedule(schedule));
  const int rank = p > 1 ? group->rank() : 0;
  return std::unique_ptr<PipelineRuntime>(
      new PipelineRuntime(std::move(schedule), std::move(group), std::move(stages), std::move(loss), rank));
}

PipelineRuntime::PipelineRuntime(PipelineSchedule schedule, std::shared_ptr<ProcessGroup> group,
                                 std::vector<std::shared_ptr<PipelineStage>> stages, LossFn loss, int rank)
    : schedule_(std::move(schedule)), group_(std::move(group)), stages_(std::move(stages)), loss_(std::move(loss)),
      rank_(rank) {
  // Between stages flows what a Linear (and its activation) outputs: bfloat16 under bf16 mixed precision. The
  // precision is the layers' (the whole model's, set by nn::MLP), not the stage wrapper's own flag.
  const nn::Module& first_layer = *stages_[0]->Children().at(0).second;
  activation_dtype_ = first_layer.precision() == nn::Precision::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
}

Tensor PipelineRuntime::MessageBuffer(const Action& a, int64_t rows, Device device) const {
  // An activation entering stage s has its input width; a gradient coming back into stage s its output width.
  const StageLayers& layers = stages_[a.stage / schedule_.num_ranks()]->layers();
  const int64_t width = a.kind == ActionKind::kRecvForward ? layers.in_features : layers.out_features;
  return Tensor::Empty({rows, width}, activation_dtype_, device);
}

absl::StatusOr<Tensor> PipelineRuntime::Step(const std::vector<Microbatch>& microbatches) {
  if (static_cast<int>(microbatches.size()) != schedule_.num_microbatches()) {
    return absl::InvalidArgumentError(absl::StrCat("PipelineRuntime::Step: the schedule has ",
                                                   schedule_.num_microbatches(), " microbatches, got ",
                                                   microbatches.size()));
  }
  const int p = schedule_.num_ranks(), last_stage = schedule_.num_stages() - 1;
  const Device device = microbatches[0].inputs.device();
  last_ = StepRecord();
  const int64_t baseline = zero::StartPeak(device);

  struct Held {  // a microbatch's activations on one stage, from its F to its B
    Variable input, output, loss;
  };
  std::map<std::pair<int, int>, Held> held;      // (stage, microbatch)
  std::map<std::pair<int, int>, Tensor> to_send;  // input gradients B made, until SEND_B takes them
  std::map<std::pair<int, int>, std::vector<autograd::WeightGradWork>> deferred;  // zb: what B left for W
  std::map<int, Tensor> received;                 // tag -> the buffer a receive fills
  std::map<int, std::shared_ptr<Work>> receiving;  // tag -> the call that fills it
  std::vector<std::shared_ptr<Work>> calls;       // every call of the step, waited for at its end
  std::vector<P2POp> ops;                         // the call being gathered
  Tensor step_loss;

  auto issue = [&] {  // the communication between two computes, as one call
    if (ops.empty()) return;
    std::vector<int> tags;
    for (const P2POp& op : ops) {
      if (op.kind == P2POp::Kind::kRecv) tags.push_back(op.tag);
    }
    std::shared_ptr<Work> work = group_->BatchSendRecv(std::move(ops));
    for (int tag : tags) receiving[tag] = work;
    calls.push_back(std::move(work));
    ops.clear();
  };
  auto take = [&](const Action& need) -> absl::StatusOr<Tensor> {  // waits for a receive, only now
    const int tag = schedule_.TagOf(need);
    RETURN_IF_ERROR(receiving.at(tag)->SynchronizeStream());
    Tensor data = std::move(received.at(tag));
    received.erase(tag);
    return data;
  };

  for (const Action& a : schedule_.ranks[rank_]) {
    const int k = a.microbatch;
    const int64_t rows = microbatches[k].inputs.size(0);
    const std::pair<int, int> key{a.stage, k};
    if (a.is_recv()) {
      Tensor buffer = MessageBuffer(a, rows, device);
      received[schedule_.TagOf(a)] = buffer;
      ops.push_back({P2POp::Kind::kRecv, buffer, schedule_.PeerOf(a), schedule_.TagOf(a)});
      continue;
    }
    if (a.is_send()) {
      Tensor data = a.kind == ActionKind::kSendForward ? held.at(key).output.data() : to_send.at(key);
      if (a.kind == ActionKind::kSendBackward) to_send.erase(key);
      ops.push_back({P2POp::Kind::kSend, std::move(data), schedule_.PeerOf(a), schedule_.TagOf(a)});
      continue;
    }
    issue();
    PipelineStage& stage = *stages_[a.stage / p];
    if (a.kind == ActionKind::kForward) {
      Variable input;
      if (a.stage == 0) {
        input = Variable(microbatches[k].inputs);
      } else {
        ASSIGN_OR_RETURN(Tensor activation, take({ActionKind::kRecvForward, a.stage, k}));
        input = Variable(std::move(activation), /*requires_grad=*/true);
      }
      const int64_t start = Tracer::NowUs();
      Tracer::Span span = Tracer::MaybeScope(tracer_, "F", k + 1000 * (a.stage / p));
      Held h{input, stage.Forward(input), Variable()};
      if (a.stage == last_stage) {
        h.loss = loss_(h.output, microbatches[k].labels);
        if (!step_loss.defined()) step_loss = Tensor::Zeros(h.loss.shape(), h.loss.dtype(), device);
        ops::AddInto(step_loss, h.loss.data(), microbatches[k].share);
      }
      held[key] = std::move(h);
      last_.peak_in_flight = std::max(last_.peak_in_flight, static_cast<int>(held.size()));
      last_.computes.push_back({a, start, Tracer::NowUs()});
    } else if (a.kind == ActionKind::kWeight) {  // zb: the weight gradients B k left, into .grad now
      const int64_t start = Tracer::NowUs();
      {
        Tracer::Span span = Tracer::MaybeScope(tracer_, "W", k + 1000 * (a.stage / p));
        for (autograd::WeightGradWork& work : deferred.at(key)) work();
      }
      deferred.erase(key);
      last_.computes.push_back({a, start, Tracer::NowUs()});
    } else {  // kBackward
      Variable root;
      Tensor seed;
      if (a.stage == last_stage) {
        root = held.at(key).loss;  // seeded with the microbatch's share, as one process accumulating it is
        const double share = microbatches[k].share;
        if (share != 1) seed = Tensor::Full(root.shape(), share, root.dtype(), device);
      } else {
        root = held.at(key).output;
        ASSIGN_OR_RETURN(seed, take({ActionKind::kRecvBackward, a.stage, k}));
      }
      const int64_t start = Tracer::NowUs();
      {
        Tracer::Span span = Tracer::MaybeScope(tracer_, "B", k + 1000 * (a.stage / p));
        if (schedule_.options.kind == ScheduleKind::kZeroBubble) {  // B: the input gradient; W k comes later
          autograd::WeightGradDeferral defer;
          autograd::Backward(root, seed);
          deferred[key] = defer.Take();
        } else {
          autograd::Backward(root, seed);
        }
      }
      if (a.stage > 0) to_send[key] = held.at(key).input.grad();
      held.erase(key);  // the microbatch's activations on this stage are released here
      last_.computes.push_back({a, start, Tracer::NowUs()});
    }
  }
  issue();
  absl::Status failed;
  for (const std::shared_ptr<Work>& call : calls) {
    absl::Status status = call->Wait();
    if (failed.ok() && !status.ok()) failed = status;
  }
  RETURN_IF_ERROR(failed);
  last_.peak_bytes = zero::PeakAbove(device, baseline);
  if (rank_ != schedule_.RankOfStage(last_stage)) return Tensor();
  return step_loss;
}

}  // namespace tinyddp::dist::pipeline
