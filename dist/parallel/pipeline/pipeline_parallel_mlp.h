// PipelineParallelMlp: an MLP cut into pipeline stages over a pipeline group, with data parallelism across
// pipelines, the pipeline wing's model (dist/parallel/pipeline/, docs/pipeline_parallel.md). What ddp_mlp
// trains under --pp=P (and --microbatches=M at --pp=1, the reference every schedule is held to).
//
//   auto mesh = dist::DeviceMesh::Create(*world, store, world->size() / P, P).value();  // rows: pipelines
//   auto full = nn::MLP(dims, {.seed = seed});                     // the same on every rank
//   auto model = PipelineParallelMlp::Create(*full, mesh.tp_group, mesh.dp_group, schedule, loss).value();
//   full.reset();                                                  // this rank keeps only its stages
//   nn::SGD sgd(model->Parameters(), options);                     // this rank's stages' parameters
//   for (...) {                                  // the ranks of a pipeline see the same batch
//     sgd.ZeroGrad();
//     Tensor loss = model->TrainStep(x, y).value();  // M microbatches through the schedule, then the
//     sgd.Step();                                    // gradients averaged over the data-parallel group
//   }
//
// The module's parameters are this rank's stages' (the whole model's modules, shared at Create, under the
// whole model's names: "2.weight"), so an optimizer over Parameters() holds only this rank's state, and the
// memory of the other stages is freed once the caller drops the whole model.
//
// Data parallelism: the pipelines of the mesh's columns see different batches; after the schedule's last
// backward, TrainStep averages this rank's gradients over its data-parallel group (one AllReduceCoalesced
// AVG after the pipeline has drained, as picotron and Megatron's simplest path do). Not DDP: DDP decides at
// each Forward whether the next backward all-reduces (no_sync), and under 1F1B the forward of the last
// microbatch runs before the backwards of the earlier ones, so its reducer would fire on the wrong backward.
// (ZeRO under a pipeline is not built; ddp_mlp refuses --zero with --pp.)
//
// Evaluation: Forward(x) (under NoGradGuard) runs the stages in order, each activation sent to the next
// stage's rank, and broadcasts the logits from the last stage's rank to the whole pipeline: collective over
// the pipeline group, every rank gets the same logits. A failed transfer is kept in status().
//
// Checkpoints: GatherInto fills a whole model (any rank's nn::MLP of the same dims) from the stages, one
// broadcast per parameter from the rank that owns it, and GatherOptimizerState the whole model's optimizer
// state in one process's numbering, so the files are one process's (safetensors with the whole model's names,
// loadable by PyTorch). LoadFrom and LoadOptimizerState go the other way, for a resume at any --pp.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_PARALLEL_MLP_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_PARALLEL_MLP_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/parallel/pipeline/pipeline_runtime.h"
#include "dist/parallel/pipeline/schedule.h"
#include "dist/parallel/pipeline/stage_plan.h"
#include "dist/parallel/tensor/tensor_parallel_mlp.h"
#include "dist/process_group/process_group.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/sequential.h"
#include "nn/tensor_map.h"

namespace tinyddp::dist::pipeline {

class PipelineParallelMlp : public nn::Module {
 public:
  /// `tensor` (--pp with --tp, the 3-D mesh): each stage's layers split further over this tensor-parallel group
  /// (dist/parallel/tensor: Create is then collective over it); its parameters are this rank's shards. The
  /// checkpoint gathers then gather the stage's shards first (collective over `tensor` too), for one stage per
  /// rank (Unimplemented for interleaved).
  /// Collective over neither group (every rank derives the same plan). `pipeline`: the pipeline's ranks (its
  /// rank r holds stages r, r+p, ...); null when schedule.ranks == 1. `data`: the data-parallel group, null
  /// or of size 1 for none. InvalidArgument for a plan or schedule that cannot run (naming the flags).
  static absl::StatusOr<std::unique_ptr<PipelineParallelMlp>> Create(const nn::Sequential& full,
                                                                     std::shared_ptr<ProcessGroup> pipeline,
                                                                     std::shared_ptr<ProcessGroup> data,
                                                                     const ScheduleOptions& schedule, LossFn loss,
                                                                     std::shared_ptr<ProcessGroup> tensor = nullptr);

  /// Evaluation: collective over the pipeline (see the header). Train with TrainStep instead.
  autograd::Variable Forward(const autograd::Variable& x) override;
  std::string ToString() const override;

  /// One step's forwards and backwards of `inputs` (this pipeline's batch) cut into the schedule's
  /// microbatches, then the gradients averaged over the data-parallel group. A batch of fewer rows than
  /// microbatches (an epoch's last) runs one row per microbatch through the same schedule for that many, as
  /// the one-process reference does. Returns the step's loss on every
  /// rank of the pipeline (broadcast from the last stage's rank). The group's error when a transfer fails.
  absl::StatusOr<Tensor> TrainStep(const Tensor& inputs, const Tensor& labels);
  /// false: TrainStep leaves each replica's own gradients (ZeRO-1 reduce-scatters them: sharded_stage_optimizer.h).
  void set_average_over_data(bool on) { average_over_data_ = on; }
  /// OK, or the first failure of an evaluation Forward.
  const absl::Status& status() const { return status_; }

  PipelineRuntime& runtime() { return *runtime_; }
  const StagePlan& plan() const { return plan_; }
  ProcessGroup* pipeline_group() const { return pipeline_.get(); }
  /// The plan's table and the schedule's (FormatPipelineOrder), for rank 0 to print.
  std::string Describe() const;
  /// Elements of the whole model's parameters (every stage's).
  int64_t TotalParameters() const;

  // --- One process's model and optimizer state -----------------------------------------------------------
  /// Collective over the pipeline: writes every stage's parameters into `full` on every pipeline rank (an
  /// nn::MLP of the whole model's dims, any device), one broadcast per parameter from its owner.
  absl::Status GatherInto(nn::Sequential& full);
  /// Not collective: copies this rank's stages' parameters from `full` (a resumed whole model).
  absl::Status LoadFrom(const nn::Sequential& full);
  /// Collective over the pipeline: the state an optimizer over the whole model's parameters would hold
  /// ("state.<i>.<field>", i the parameter's position in the whole model), from `local`, an optimizer over
  /// Parameters() (in its order), one broadcast per tensor. Every rank's optimizer must be of the same kind
  /// and options, and have stepped (or not) alike.
  absl::StatusOr<nn::TensorMap> GatherOptimizerState(const nn::Optimizer& local);
  /// Not collective: loads into `local` this rank's entries of `full_state` (the whole model's numbering).
  absl::Status LoadOptimizerState(const nn::TensorMap& full_state, nn::Optimizer& local);

 private:
  PipelineParallelMlp(StagePlan plan, std::shared_ptr<ProcessGroup> pipeline, std::shared_ptr<ProcessGroup> data);
  // The schedule for an epoch's short last batch of `rows` < m rows (kept for the next epoch's).
  absl::StatusOr<PipelineRuntime*> ShortRuntime(int rows);
  // --tp: OK with one stage per rank; Unimplemented naming `what` otherwise.
  absl::Status CheckOneStagePerRank(const char* what) const;
  // Whole-model parameter index of each of `local`'s parameters; InvalidArgument for a stranger.
  absl::StatusOr<std::vector<size_t>> WholeIndicesOf(const nn::Optimizer& local) const;

  StagePlan plan_;
  std::shared_ptr<ProcessGroup> pipeline_, data_;
  std::unique_ptr<PipelineRuntime> runtime_, short_runtime_;
  std::vector<std::shared_ptr<tensor_parallel::TensorParallelMlp>> tensor_parallel_;  // --tp: each stage's split
  std::vector<int> my_stages_;  // this rank's stages, by chunk
  LossFn loss_;
  // The whole model's parameters, in one process's order: name, shape, and the pipeline rank that owns it.
  struct WholeParam {
    std::string name;
    Shape shape;
    int owner = 0;
  };
  std::vector<WholeParam> whole_;
  absl::Status status_;
  bool average_over_data_ = true;
};

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_PARALLEL_MLP_H_
