// The pipeline-parallel MLP (pipeline_parallel_mlp.h).
#include "dist/parallel/pipeline/pipeline_parallel_mlp.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "dist/parallel/pipeline/schedule_printer.h"
#include "tensor/ops.h"

namespace tinyddp::dist::pipeline {
namespace {

constexpr int kEvalTag = 1 << 20;  // evaluation's activations: apart from the training step's tags

// "state.<index>.<field>" -> (index, field), as nn::Optimizer names its state.
bool ParseStateKey(const std::string& key, size_t* index, std::string* field) {
  std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('.', 2));
  uint64_t i = 0;
  if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], &i) || parts[2].empty()) return false;
  *index = static_cast<size_t>(i);
  *field = parts[2];
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineParallelMlp>> PipelineParallelMlp::Create(const nn::Sequential& full,
                                                                                  std::shared_ptr<ProcessGroup> pipeline,
                                                                                  std::shared_ptr<ProcessGroup> data,
                                                                                  const ScheduleOptions& options,
                                                                                  LossFn loss,
                                                                                  std::shared_ptr<ProcessGroup> tensor) {
  const int p = options.ranks;
  ASSIGN_OR_RETURN(StagePlan plan, StagePlan::Make(full, p * options.virtual_stages,
                                                   /*equal=*/options.kind == ScheduleKind::kInterleaved));
  ASSIGN_OR_RETURN(PipelineSchedule schedule, MakeSchedule(options));
  const int rank = p > 1 && pipeline != nullptr ? pipeline->rank() : 0;
  std::unique_ptr<PipelineParallelMlp> model(new PipelineParallelMlp(plan, pipeline, std::move(data)));
  std::vector<std::shared_ptr<PipelineStage>> stages;
  for (int s = rank; s < static_cast<int>(plan.stages.size()); s += p) {
    model->my_stages_.push_back(s);
    if (tensor != nullptr && tensor->size() > 1) {  // 3-D: the stage's layers split over the tensor-parallel group
      std::shared_ptr<nn::Module> trailing;
      const std::shared_ptr<nn::Sequential> layers = StageSequential(full, plan.stages[s], &trailing);
      ASSIGN_OR_RETURN(std::shared_ptr<tensor_parallel::TensorParallelMlp> split,
                       tensor_parallel::TensorParallelMlp::Create(*layers, tensor));
      model->tensor_parallel_.push_back(split);
      stages.push_back(std::make_shared<PipelineStage>(split, trailing, plan.stages[s]));
    } else {
      stages.push_back(std::make_shared<PipelineStage>(full, plan.stages[s]));
    }
    for (const auto& [name, child] : stages.back()->Children()) model->RegisterModule(name, child);
  }
  for (const auto& [name, param] : full.NamedParameters()) {
    size_t child = 0;
    (void)absl::SimpleAtoi(std::string(name.substr(0, name.find('.'))), &child);
    int stage = 0;
    while (child >= plan.stages[stage].end_child) ++stage;
    model->whole_.push_back({name, param.shape(), stage % p});
  }
  model->loss_ = loss;
  ASSIGN_OR_RETURN(model->runtime_, PipelineRuntime::Create(std::move(schedule), std::move(pipeline),
                                                            std::move(stages), std::move(loss)));
  return model;
}

PipelineParallelMlp::PipelineParallelMlp(StagePlan plan, std::shared_ptr<ProcessGroup> pipeline,
                                         std::shared_ptr<ProcessGroup> data)
    : plan_(std::move(plan)), pipeline_(std::move(pipeline)), data_(std::move(data)) {}

absl::StatusOr<Tensor> PipelineParallelMlp::TrainStep(const Tensor& inputs, const Tensor& labels) {
  const int m = runtime_->schedule().num_microbatches();
  PipelineRuntime* runtime = runtime_.get();
  if (inputs.size(0) < m) {  // an epoch's last, short batch: one microbatch per row, through a schedule of its own
    ASSIGN_OR_RETURN(runtime, ShortRuntime(static_cast<int>(inputs.size(0))));
  }
  ASSIGN_OR_RETURN(const std::vector<Microbatch> microbatches,
                   SplitBatch(inputs, labels, runtime->schedule().num_microbatches()));
  ASSIGN_OR_RETURN(Tensor loss, runtime->Step(microbatches));
  for (const auto& split : tensor_parallel_) RETURN_IF_ERROR(split->status());  // --tp: a failed all_reduce
  if (average_over_data_ && data_ != nullptr && data_->size() > 1) {  // the replicas' average, as DDP's hook
    std::vector<Tensor> grads;
    for (const autograd::Variable& param : Parameters()) grads.push_back(param.grad());
    RETURN_IF_ERROR(data_->AllReduceCoalesced(grads, ReduceOp::kAvg)->Wait());
  }
  // The loss lives on the last stage's rank; every rank of the pipeline logs it.
  Tensor all = Tensor::Zeros({1}, DType::kFloat32, inputs.device());
  if (loss.defined()) ops::CopyInto(all, loss.View({1}));
  if (runtime_->schedule().num_ranks() > 1) {
    const int last = runtime_->schedule().RankOfStage(runtime_->schedule().num_stages() - 1);
    RETURN_IF_ERROR(pipeline_->Broadcast(all, last)->Wait());
  }
  return all;
}

absl::StatusOr<PipelineRuntime*> PipelineParallelMlp::ShortRuntime(int rows) {
  if (short_runtime_ == nullptr || short_runtime_->schedule().num_microbatches() != rows) {
    ScheduleOptions options = runtime_->schedule().options;
    options.microbatches = rows;
    // Interleaved needs m to be a multiple of p: its 1F1B twin runs the same microbatches with the same sums.
    if (options.kind == ScheduleKind::kInterleaved && rows % options.ranks != 0) options.kind = ScheduleKind::kOneFOneB;
    if (options.kind != ScheduleKind::kInterleaved) options.virtual_stages = 1;
    if (options.virtual_stages != runtime_->schedule().options.virtual_stages) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "a batch of %d rows is fewer than --microbatches=%d and cannot run interleaved: use a --batch_size whose "
          "epochs end in a full batch", rows, runtime_->schedule().num_microbatches()));
    }
    ASSIGN_OR_RETURN(PipelineSchedule schedule, MakeSchedule(options));
    ASSIGN_OR_RETURN(short_runtime_, PipelineRuntime::Create(std::move(schedule), pipeline_, runtime_->stages(),
                                                              loss_));
  }
  return short_runtime_.get();
}

autograd::Variable PipelineParallelMlp::Forward(const autograd::Variable& x) {
  const PipelineSchedule& schedule = runtime_->schedule();
  const int p = schedule.num_ranks(), stages = schedule.num_stages(), rank = runtime_->rank();
  const int64_t rows = x.shape()[0];
  const DType dtype = runtime_->activation_dtype();
  autograd::Variable act = x;
  for (int s = 0; s < stages && status_.ok(); ++s) {
    if (schedule.RankOfStage(s) != rank) continue;
    if (s > 0) {  // the previous stage lives on another rank (p > 1: neighbours differ)
      Tensor in = Tensor::Empty({rows, plan_.stages[s].in_features}, dtype, x.device());
      status_ = pipeline_->Recv(in, schedule.RankOfStage(s - 1), kEvalTag + s)->Wait();
      act = autograd::Variable(in);
    }
    act = runtime_->stages()[s / p]->Forward(act);
    if (s + 1 < stages && status_.ok()) {
      status_ = pipeline_->Send(act.data(), schedule.RankOfStage(s + 1), kEvalTag + s + 1)->Wait();
    }
  }
  if (p == 1 || !status_.ok()) return act;
  Tensor logits = Tensor::Empty({rows, plan_.stages.back().out_features}, dtype, x.device());
  const int last = schedule.RankOfStage(stages - 1);
  if (rank == last) ops::CopyInto(logits, act.data());
  status_ = pipeline_->Broadcast(logits, last)->Wait();
  return autograd::Variable(logits);
}

std::string PipelineParallelMlp::ToString() const {
  std::string s = "PipelineParallelMlp(\n";
  for (const auto& [name, child] : Children()) absl::StrAppend(&s, "  (", name, "): ", child->ToString(), "\n");
  return s + ")";
}

std::string PipelineParallelMlp::Describe() const {
  return absl::StrCat(plan_.Describe(runtime_->schedule().num_ranks()), FormatPipelineOrder(runtime_->schedule()));
}

int64_t PipelineParallelMlp::TotalParameters() const {
  int64_t n = 0;
  for (const WholeParam& w : whole_) {
    int64_t elements = 1;
    for (int64_t d : w.shape) elements *= d;
    n += elements;
  }
  return n;
}

absl::Status PipelineParallelMlp::GatherInto(nn::Sequential& full) {
  const auto mine = NamedParameters();
  std::map<std::string, autograd::Variable> by_name(mine.begin(), mine.end());
  const auto target = full.NamedParameters();
  if (target.size() != whole_.size()) {
    return absl::InvalidArgumentError("PipelineParallelMlp::GatherInto: not a model of the pipeline's dims");
  }
  if (!tensor_parallel_.empty()) {  // --tp: my stage's shards gathered whole into `full` first (collective over tp)
    RETURN_IF_ERROR(CheckOneStagePerRank("checkpoints"));
    std::shared_ptr<nn::Module> trailing;
    const std::shared_ptr<nn::Sequential> stage = StageSequential(full, plan_.stages[my_stages_[0]], &trailing);
    RETURN_IF_ERROR(tensor_parallel_[0]->GatherInto(*stage));
    by_name.clear();
    for (const auto& [name, param] : stage->NamedParameters()) by_name[name] = param;  // the whole stage now
  }
  for (size_t i = 0; i < whole_.size(); ++i) {
    Tensor dst = target[i].second.data();
    if (target[i].first != whole_[i].name || dst.shape() != whole_[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat("PipelineParallelMlp::GatherInto: parameter ", i, " is ",
                                                     target[i].first, ", expected ", whole_[i].name));
    }
    // On the stages' device (the group's), then into `full` wherever it lives.
    Tensor buffer = Tensor::Empty(dst.shape(), dst.dtype(), mine.empty() ? dst.device() : mine[0].second.device());
    if (by_name.count(whole_[i].name)) ops::CopyInto(buffer, by_name.at(whole_[i].name).data());
    if (pipeline_ != nullptr && pipeline_->size() > 1) {
      RETURN_IF_ERROR(pipeline_->Broadcast(buffer, whole_[i].owner)->Wait());
    }
    ops::CopyInto(dst, buffer.To(dst.device()));
  }
  full.RefreshComputeCopies();
  return absl::OkStatus();
}

absl::Status PipelineParallelMlp::LoadFrom(const nn::Sequential& full) {
  if (!tensor_parallel_.empty()) {  // --tp: this rank's slices of its stage
    RETURN_IF_ERROR(CheckOneStagePerRank("a resume"));
    std::shared_ptr<nn::Module> trailing;
    return tensor_parallel_[0]->LoadFrom(*StageSequential(full, plan_.stages[my_stages_[0]], &trailing));
  }
  std::map<std::string, Tensor> values;
  for (const auto& [name, param] : full.NamedParameters()) values[name] = param.data();
  for (const auto& [name, param] : NamedParameters()) {
    if (!values.count(name) || values.at(name).shape() != param.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("PipelineParallelMlp::LoadFrom: the model has no ", name,
                                                     " of this stage's shape"));
    }
    Tensor dst = param.data();
    ops::CopyInto(dst, values.at(name).To(dst.device()));
  }
  RefreshComputeCopies();
  return absl::OkStatus();
}

absl::Status PipelineParallelMlp::CheckOneStagePerRank(const char* what) const {
  if (tensor_parallel_.size() == 1) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(what, " of --pp with --tp and several stages per rank (interleaved) "
                                               "are not built: use one stage per rank"));
}

absl::StatusOr<std::vector<size_t>> PipelineParallelMlp::WholeIndicesOf(const nn::Optimizer& local) const {
  const auto mine = NamedParameters();
  std::vector<size_t> indices;
  for (const autograd::Variable& param : local.params()) {
    size_t k = 0;
    while (k < mine.size() && !mine[k].second.Is(param)) ++k;
    if (k == mine.size()) {
      return absl::InvalidArgumentError("PipelineParallelMlp: the optimizer holds a parameter of no stage of this "
                                        "rank; build it over PipelineParallelMlp::Parameters()");
    }
    size_t w = 0;
    while (whole_[w].name != mine[k].first) ++w;
    indices.push_back(w);
  }
  return indices;
}

absl::StatusOr<nn::TensorMap> PipelineParallelMlp::GatherOptimizerState(const nn::Optimizer& local) {
  ASSIGN_OR_RETURN(const std::vector<size_t> whole_index, WholeIndicesOf(local));
  std::map<size_t, size_t> local_of;  // whole index -> local index
  for (size_t i = 0; i < whole_index.size(); ++i) local_of[whole_index[i]] = i;
  // The fields every stepped parameter has: the same on every rank (one optimizer kind and options).
  nn::TensorMap state = local.StateTensors();
  if (!tensor_parallel_.empty()) {  // --tp: the stage's whole state (stage numbering = local's order) first
    RETURN_IF_ERROR(CheckOneStagePerRank("checkpoints"));
    ASSIGN_OR_RETURN(state, tensor_parallel_[0]->GatherOptimizerState(local));
  }
  std::vector<std::string> fields;
  for (const auto& [key, tensor] : state) {
    size_t i = 0;
    std::string field;
    if (ParseStateKey(key, &i, &field) && i == 0) fields.push_back(field);
  }
  nn::TensorMap whole;
  const Device device = local.params().empty() ? Device::CPU() : local.params()[0].device();
  for (size_t w = 0; w < whole_.size(); ++w) {
    for (const std::string& field : fields) {
      const bool scalar = field == "step";  // Adam's count: a float32 scalar on the CPU, as in PyTorch
      Tensor buffer = Tensor::Zeros(scalar ? Shape{1} : whole_[w].shape, DType::kFloat32,
                                    scalar && pipeline_ == nullptr ? Device::CPU() : device);
      if (local_of.count(w)) {
        const std::string key = absl::StrCat("state.", local_of.at(w), ".", field);
        if (!state.count(key)) {
          return absl::FailedPreconditionError(absl::StrCat("optimizer state: ", whole_[w].name, " has no ", field));
        }
        ops::CopyInto(buffer, state.at(key).View(buffer.shape()).To(buffer.device()));
      }
      if (pipeline_ != nullptr && pipeline_->size() > 1) {
        RETURN_IF_ERROR(pipeline_->Broadcast(buffer, whole_[w].owner)->Wait());
      }
      whole[absl::StrCat("state.", w, ".", field)] = scalar ? buffer.To(Device::CPU()).View({}) : buffer;
    }
  }
  return whole;
}

absl::Status PipelineParallelMlp::LoadOptimizerState(const nn::TensorMap& full_state, nn::Optimizer& local) {
  ASSIGN_OR_RETURN(const std::vector<size_t> whole_index, WholeIndicesOf(local));
  std::map<size_t, size_t> local_of;
  for (size_t i = 0; i < whole_index.size(); ++i) local_of[whole_index[i]] = i;
  nn::TensorMap mine;
  for (const auto& [key, tensor] : full_state) {
    size_t w = 0;
    std::string field;
    if (!ParseStateKey(key, &w, &field)) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state: '", key, "' is not state.<index>.<field>"));
    }
    if (local_of.count(w)) mine[absl::StrCat("state.", local_of.at(w), ".", field)] = tensor;
  }
  if (!tensor_parallel_.empty()) {  // --tp: `mine` is the stage's whole state; the shards take their slices
    RETURN_IF_ERROR(CheckOneStagePerRank("a resume"));
    return tensor_parallel_[0]->LoadOptimizerState(mine, local);
  }
  return local.LoadStateTensors(mine);
}

}  // namespace tinyddp::dist::pipeline
