// What one rank of examples/ddp_mlp.cc builds before it trains: its place in the job (Job), the data, the
// model, the optimizer and the learning-rate schedule (Setup, filled by BuildSetup), and the collective
// steps around them that every rank takes together (AgreeOnStatus, ResumeOnEveryRank, ShardOptimizer).
// The training loop itself stays in ddp_mlp.cc; DDP joins the Setup there, once the weights are final.
#ifndef TINYDDP_EXAMPLES_INTERNAL_TRAIN_SETUP_H_
#define TINYDDP_EXAMPLES_INTERNAL_TRAIN_SETUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/accel/copy_engine/copy_engine_hook.h"
#include "dist/accel/graph/graphed_step.h"
#include "dist/ddp/ddp.h"
#include "dist/ladder/data_parallel.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/join/join.h"
#include "dist/parallel/pipeline/pipeline_parallel_mlp.h"
#include "dist/parallel/pipeline/sharded_stage_optimizer.h"
#include "dist/parallel/tensor/tensor_parallel_mlp.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "dist/parallel/zero/gradient_shards.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/process_group/process_group.h"
#include "examples/internal/progress.h"
#include "examples/internal/train_checkpoint.h"
#include "examples/internal/train_options.h"
#include "nn/device_lr.h"
#include "nn/loss.h"
#include "nn/lr_schedule.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/sequential.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace tinyddp::examples {

struct Datasets {
  std::shared_ptr<data::TensorDataset> train, test;
};

/// --dataset: Fashion-MNIST from --data_dir (checked: the splits can train together), or a synthetic set.
absl::StatusOr<Datasets> LoadDatasets(const TrainOptions& o);

/// --optimizer over `params`: SGD (momentum, weight decay) or AdamW.
std::unique_ptr<nn::Optimizer> MakeOptimizer(const TrainOptions& o, std::vector<autograd::Variable> params);

/// The learning rate as a pure function of the global step, so a resumed run continues the same curve.
std::unique_ptr<nn::LrSchedule> MakeSchedule(const TrainOptions& o, int64_t steps_per_epoch);

/// An optimizer step takes --grad_accum_steps batches; an epoch's last step may take fewer. The progress
/// of a run (TrainingProgress: batch_in_epoch, global_step, checkpoints) counts optimizer steps.
int64_t OptimizerStepsPerEpoch(const TrainOptions& o, const data::DataLoader& loader);

/// This rank's place in the job: its process group, and the device its model and batches live on.
/// Under --tp the world is a mesh (dist/parallel/subgroups/device_mesh.h) and two of its groups matter:
/// `data`, this rank's column (the ranks that hold the same shards and see different batches: DDP, ZeRO,
/// the sampler and the evaluation run over it), and `tensor`, its row (the ranks that split each layer and
/// see the same batch). Without --tp, `data` is `pg` and `tensor` is null. Under --pp the mesh's rows are
/// pipelines instead: `pipeline` is this rank's row (its stages' neighbours), `data` its column; with --pp and
/// --tp the mesh is dp x pp x tp and all three are set.
struct Job {
  std::shared_ptr<dist::ProcessGroup> pg;  // the world: agreement, checkpoints, logging
  Device device;
  std::shared_ptr<dist::ProcessGroup> data;    // data parallel: pg itself without --tp or --pp
  std::shared_ptr<dist::ProcessGroup> tensor;  // tensor parallel (--tp > 1), else null
  std::shared_ptr<dist::ProcessGroup> pipeline;  // pipeline parallel (--pp > 1), else null
  dist::ProcessGroup& dp() const { return data ? *data : *pg; }
};

/// Collective: OK only when every rank's `local` is OK. A rank that failed gets its own error back; the
/// others learn that someone failed (whose message is printed above theirs) and stop too, cleanly.
absl::Status AgreeOnStatus(const Job& job, const absl::Status& local, const char* what);

/// Collective over job.pg: sets job.data and job.tensor. Without --tp, data is the world. With --tp=T the
/// world's W ranks become a (W/T) x T mesh (DeviceMesh, rows of consecutive ranks: on machines of T GPUs a
/// row is a machine, so the chatty tensor-parallel all_reduces stay on NVLink). InvalidArgument when T does
/// not divide W. Returns the mesh's line for rank 0 to print ("" without --tp). --pp=P likewise: a (W/P) x P
/// mesh whose rows are pipelines (job.pipeline) and columns data-parallel groups (job.data); the line then
/// names every rank's role.
absl::StatusOr<std::string> JoinMesh(const TrainOptions& o, Job& job);

/// Everything a rank trains with: BuildSetup fills the first part, Train adds DDP once the weights are final.
struct Setup {
  Datasets datasets;
  std::unique_ptr<data::DataLoader> loader;  // this rank's batches of the training set
  std::vector<int64_t> eval_indices;         // this rank's unpadded shard of the test set
  std::vector<int64_t> dims;                 // 784, hidden..., 10
  int64_t steps_per_epoch = 0;               // optimizer steps; under --join the longest shard's
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<nn::LrSchedule> schedule;
  nn::CrossEntropyLoss loss_fn;
  std::unique_ptr<dist::Tracer> tracer;              // --trace; null when off
  // The DDP of --ddp, wrapping `model`: one of the two is set.
  std::unique_ptr<dist::DistributedDataParallel> ddp;  // --ddp=full (the default): the production DDP
  std::unique_ptr<dist::ladder::DataParallel> rung;    // --ddp=naive|flat|bucketed: a teaching rung (dist/ladder)
  std::unique_ptr<dist::zero::ZeroRedundancyOptimizer> zero;  // --zero=1|2: the optimizer, attached to `ddp`
  std::unique_ptr<dist::FusedOptimizer> fused;  // --optimizer_in_backward: the optimizer, one per bucket of `ddp`
  std::shared_ptr<dist::zero::GradientShards> gradient_shards;  // --zero=2: the comm hook `ddp` uses, its blocks
  std::unique_ptr<dist::zero::FullyShardedDataParallel> fsdp;   // --zero=3: instead of `ddp`, the model sharded
  // --tp: the model DDP wraps and trains is `tp`, this rank's shards of `model` (which stays, whole, as the
  // vessel checkpoints are written from and read into), and `optimizer` steps the shards; `full_optimizer`
  // is the whole model's, a vessel like `model` (it holds state only while a checkpoint is written or read).
  std::unique_ptr<dist::tensor_parallel::TensorParallelMlp> tp;
  std::unique_ptr<nn::Optimizer> full_optimizer;
  // --pp (or --microbatches): the model this rank trains is `pipeline`, its stages of the whole model; `model`
  // is dropped once they are cut (this rank keeps only its stages), and `optimizer` steps the stages.
  // Checkpoints gather the stages into a fresh whole model (GatherStages). No DDP: the pipeline averages its
  // gradients over job.data itself.
  std::unique_ptr<dist::pipeline::PipelineParallelMlp> pipeline;
  // --pp --zero=1: each stage's optimizer state split over its replicas; `optimizer` then holds none.
  std::unique_ptr<dist::pipeline::ShardedStageOptimizer> stage_zero;
  // --join: the ranks agree each step on who still has a batch; one that ran out shadows the step with
  // `placeholder` as its input (dist/parallel/join/join.h).
  std::unique_ptr<dist::join::Join> join;
  autograd::Variable placeholder;
  int64_t memory_baseline = 0;  // tensor bytes live before the model was built (the memory table's peak is above it)
  std::shared_ptr<dist::CopyEngineHook> copy_engines;  // --ddp=full over NCCL: the comm hook `ddp` uses
  std::vector<std::string> notes;                   // rank 0's lines from PrepareOutputs
  // --cuda_graph (SetUpCudaGraph in ddp_mlp.cc); all null/undefined when steps run eagerly.
  std::unique_ptr<nn::DeviceLr> device_lr;  // the schedule, advanced on the device by each step
  Tensor static_inputs, static_labels;      // the fixed buffers the recorded step reads
  std::unique_ptr<dist::GraphedStep> graphed;
  bool said_partial_batch = false;
};

/// The data (this rank's sampler and loader, its shard of the test set), the model (the same seed on
/// every rank), the optimizer and the schedule (not under --join: the ranks agree on an epoch's length
/// first); rank 0 also checks that the outputs are writable.
absl::Status BuildSetup(const TrainOptions& o, const Job& job, Setup& s);

/// Collective (--resume): rank 0 picks the newest good checkpoint and tells the others which one (they may
/// not see the same damaged files the same way, but they must all load the same step); every rank loads
/// it, and the ranks agree on success before anyone continues, so a failure stops all of them cleanly.
/// A fresh TrainingProgress when there is nothing to resume from.
absl::StatusOr<TrainingProgress> ResumeOnEveryRank(const Job& job, const TrainOptions& o, int64_t steps_per_epoch,
                                                   nn::Module& model, nn::Optimizer& optimizer, Progress& progress);

/// The module that trains: ZeRO-3's sharded model, --tp's shards, else `model`.
nn::Module& TrainedModel(const Setup& s);

/// --tp: splits s.model over job.tensor (s.tp), and the optimizer with it: s.optimizer becomes the shards'
/// (with the resumed state sliced in), the whole one moves to s.full_optimizer. Collective over job.tensor.
absl::Status SplitModel(const TrainOptions& o, const Job& job, Setup& s);

/// --pp: cuts s.model into this rank's stages (s.pipeline, over job.pipeline and job.data), with the optimizer's
/// (resumed) state sliced into an optimizer over the stages (s.optimizer); s.model is dropped. With --zero=1 the
/// state moves on into s.stage_zero, split over job.data. Not collective.
absl::Status SplitIntoStages(const TrainOptions& o, const Job& job, Setup& s);
/// --pp: the whole model and its optimizer (a fresh nn::MLP of s.dims and an optimizer over it holding the whole
/// state), gathered from every stage. Collective over job.pipeline.
absl::Status GatherStages(const TrainOptions& o, const Setup& s, std::shared_ptr<nn::Sequential>* model,
                          std::unique_ptr<nn::Optimizer>* optimizer);

/// --zero=1|2: the optimizer becomes ZeRO's, sharded over the ranks inside DDP (docs/zero.md): attached to
/// s.ddp, which reduce-scatters its buckets (zero::ReduceScatterHook, or under --zero=2 the hook of
/// s.gradient_shards, which keeps only this rank's block of the gradients). s.optimizer stays as the
/// unsharded vessel checkpoints read and write: here it hands a resumed state to the shards, and it holds no
/// state while training. Precondition: s.ddp is set (--ddp=full) with that hook.
absl::Status ShardOptimizer(const TrainOptions& o, Setup& s);
/// --optimizer_in_backward: a FusedOptimizer attached to s.ddp, stepping each bucket during backward, with the
/// optimizer's (resumed) state moved into it (s.optimizer then holds none and steps nothing).
absl::Status StepInsideBackward(const TrainOptions& o, Setup& s);
/// --zero=3: the model's layers sharded over the ranks (zero::FullyShardedDataParallel, which replaces DDP:
/// s.fsdp is set, s.ddp stays null), with the optimizer's state resumed into the shards as ShardOptimizer does.
absl::Status ShardModel(const TrainOptions& o, const Job& job, Setup& s);
/// Collective: the table of what each rank holds (parameters, gradients, optimizer state, the allocator's
/// peak above s.memory_baseline), for rank 0 to print once; empty on other ranks and for the ladder's rungs.
absl::StatusOr<std::string> MemoryTable(const TrainOptions& o, const Job& job, const Setup& s);

// --- The calls a step makes to the DDP of --ddp, whichever it is (s.ddp or s.rung) ------------------

/// Runs the model through DDP. `sync` false: the backward that follows only accumulates into .grad
/// (PyTorch's no_sync(), for --grad_accum_steps).
autograd::Variable DdpForward(Setup& s, const autograd::Variable& input, bool sync);
/// After autograd::Backward: a lower rung communicates (naive, flat) or waits (bucketed) here; DDP already
/// has, and this returns its status (a bucket's collective failed: the gradients are not averages).
absl::Status FinishBackward(Setup& s);
/// What the header prints about the DDP: DDP's bucket table (and ZeRO's blocks, or whether the copy
/// engines are on), ZeRO-3's layers, or the rung's line.
std::string DescribeDdp(const Setup& s);
/// The bytes of each all_reduce one step issues, in order (--trace's picture labels them).
std::vector<int64_t> AllReduceBytes(const Setup& s);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_TRAIN_SETUP_H_
