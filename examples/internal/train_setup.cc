// What one rank builds before it trains (train_setup.h).
#include "examples/internal/train_setup.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "data/dataset_check.h"
#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "data/synthetic.h"
#include "dist/parallel/subgroups/device_mesh.h"
#include "dist/parallel/zero/memory_table.h"
#include "examples/internal/evaluate.h"
#include "examples/internal/startup_checks.h"
#include "nn/adam.h"
#include "nn/checkpoint.h"
#include "nn/mlp.h"
#include "nn/precision.h"
#include "nn/sgd.h"

namespace tinyddp::examples {

absl::StatusOr<Datasets> LoadDatasets(const TrainOptions& o) {
  Datasets d;
  if (o.dataset == "synthetic") {
    data::SyntheticOptions s{.num_examples = o.synthetic_examples,
                             .input_size = o.synthetic_input_size,
                             .seed = static_cast<uint64_t>(o.seed)};
    auto train = data::MakeSyntheticDataset(s, "train");
    RETURN_IF_ERROR(train);
    s.num_examples = std::max<int64_t>(o.synthetic_examples / 5, 1);
    auto test = data::MakeSyntheticDataset(s, "test");
    RETURN_IF_ERROR(test);
    d.train = std::make_shared<data::TensorDataset>(*std::move(train));
    d.test = std::make_shared<data::TensorDataset>(*std::move(test));
    return d;
  }
  const std::string where = "--data_dir=" + (o.data_dir.empty() ? data::kDefaultFashionMnistDir : o.data_dir);
  auto train = data::LoadFashionMnist(o.data_dir, "train");
  RETURN_IF_ERROR(train);
  auto test = data::LoadFashionMnist(o.data_dir, "test");
  RETURN_IF_ERROR(test);
  RETURN_IF_ERROR(data::CheckTrainingData(*train, *test, where));  // before a model is built from them
  d.train = std::make_shared<data::TensorDataset>(*std::move(train));
  d.test = std::make_shared<data::TensorDataset>(*std::move(test));
  return d;
}

std::unique_ptr<nn::Optimizer> MakeOptimizer(const TrainOptions& o, std::vector<autograd::Variable> params) {
  if (o.optimizer == "adamw") {
    nn::AdamWOptions a;
    a.lr = o.lr;
    a.weight_decay = o.weight_decay;
    return std::make_unique<nn::AdamW>(std::move(params), a);
  }
  return std::make_unique<nn::SGD>(std::move(params),
                                   nn::SgdOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
}

// The learning rate as a pure function of the global step, so a resumed run continues the same curve.
std::unique_ptr<nn::LrSchedule> MakeSchedule(const TrainOptions& o, int64_t steps_per_epoch) {
  if (o.lr_schedule == "step")
    return std::make_unique<nn::StepLr>(o.lr, o.lr_step_epochs * steps_per_epoch, o.lr_gamma);
  if (o.lr_schedule == "cosine") {
    const int64_t total = o.epochs * steps_per_epoch;
    return std::make_unique<nn::CosineWithWarmupLr>(o.lr, std::min(o.warmup_steps, total), total);
  }
  return std::make_unique<nn::ConstantLr>(o.lr);
}

// An optimizer step takes --grad_accum_steps batches; an epoch's last step may take fewer. The progress
// of a run (TrainingProgress: batch_in_epoch, global_step, checkpoints) counts optimizer steps.
int64_t OptimizerStepsPerEpoch(const TrainOptions& o, const data::DataLoader& loader) {
  return (loader.num_batches() + o.grad_accum_steps - 1) / o.grad_accum_steps;
}

// Collective: OK only when every rank's `local` is OK. A rank that failed gets its own error back; the
// others learn that someone failed (whose message is printed above theirs) and stop too, cleanly.
absl::Status AgreeOnStatus(const Job& job, const absl::Status& local, const char* what) {
  Tensor failed = Tensor::FromVector<int64_t>({local.ok() ? 0 : 1}, {1}, job.device);
  RETURN_IF_ERROR(job.pg->AllReduce(failed, dist::ReduceOp::kSum)->Wait());
  RETURN_IF_ERROR(local);
  const int64_t n = failed.ToVector<int64_t>()[0];
  if (n > 0) return absl::AbortedError(absl::StrCat(n, " other rank(s) failed while ", what, "; see above"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> JoinMesh(const TrainOptions& o, Job& job) {
  job.data = job.pg;
  if (o.tp == 1) return std::string();
  const int world = job.pg->size();
  if (world % o.tp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tp=%d does not divide the job's %d ranks: start a multiple of %d ranks (--nproc, or --nproc_per_node "
        "x --nnodes), each group of %d consecutive ranks splitting the layers", o.tp, world, o.tp, o.tp));
  }
  ASSIGN_OR_RETURN(const dist::DeviceMesh mesh,
                   dist::DeviceMesh::Create(*job.pg, job.pg->SubStore("mesh"), world / static_cast<int>(o.tp),
                                            static_cast<int>(o.tp), {.flight_recorder = true}));
  job.data = mesh.dp_group;
  job.tensor = mesh.tp_group;
  return mesh.ToString(job.pg->rank());
}

absl::Status BuildSetup(const TrainOptions& o, const Job& job, Setup& s) {
  // Data: every rank loads the whole dataset; the sampler decides which part each rank trains on. Under
  // --tp the ranks of one tensor-parallel group are one replica: they get the same part (data-parallel rank).
  const int rank = job.dp().rank(), world = job.dp().size();
  absl::StatusOr<Datasets> datasets = LoadDatasets(o);
  RETURN_IF_ERROR(datasets.status());
  s.datasets = *std::move(datasets);
  auto sampler = data::DistributedSampler::Create(
      s.datasets.train->Size(),
      {.num_replicas = world, .rank = rank, .shuffle = o.shuffle, .seed = static_cast<uint64_t>(o.seed),
       .pad = !o.join});  // --join: uneven shards, no padding (dist/parallel/join)
  RETURN_IF_ERROR(sampler.status());
  auto loader =
      data::DataLoader::Create(s.datasets.train, *sampler, {.batch_size = o.batch_size, .device = job.device});
  RETURN_IF_ERROR(loader.status());
  s.loader = *std::move(loader);
  s.eval_indices = EvalShardIndices(s.datasets.test->Size(), world, rank);

  // The model: the same seed on every rank gives the same initial weights (DDP also broadcasts rank
  // 0's, as PyTorch does, so a model initialised differently would still start in sync).
  s.dims = {s.datasets.train->input_size()};
  s.dims.insert(s.dims.end(), o.hidden.begin(), o.hidden.end());
  s.dims.push_back(s.datasets.train->num_classes());
  // --precision=bf16: float32 master weights with bfloat16 compute copies, which the optimizer writes
  // in its own pass over the weights (nn/precision.h; docs/mixed_precision.md).
  const nn::Precision precision = nn::ParsePrecision(o.precision).value();  // checked by ParseTrainOptions
  s.memory_baseline = dist::zero::StartPeak(job.device);  // the data is loaded; what follows is the model's
  s.model = nn::MLP(s.dims, {.device = job.device, .seed = static_cast<uint64_t>(o.seed), .precision = precision});
  if (!o.init_from.empty()) RETURN_IF_ERROR(nn::LoadModule(*s.model, o.init_from));
  s.optimizer = MakeOptimizer(o, s.model->Parameters());
  s.optimizer->SetComputeCopies(s.model->ComputeCopies());  // none under fp32
  // --join: no schedule yet. This rank's own count of steps may be 0 (more ranks than examples), which no
  // schedule accepts; Train builds it from the longest shard's count once the ranks have agreed on it.
  if (!o.join) s.schedule = MakeSchedule(o, OptimizerStepsPerEpoch(o, *s.loader));

  // Outputs writable now rather than after an epoch; no other run's checkpoints in a fresh run's folder.
  if (job.pg->rank() == 0) {
    ASSIGN_OR_RETURN(s.notes, PrepareOutputs(o, o.resume));
  }
  return absl::OkStatus();
}

// --resume: rank 0 picks the newest good checkpoint and tells the others which one (they may not see
// the same damaged files the same way, but they must all load the same step); every rank loads it,
// and the ranks agree on success before anyone continues, so a failure stops all of them cleanly.
absl::StatusOr<TrainingProgress> ResumeOnEveryRank(const Job& job, const TrainOptions& o, int64_t steps_per_epoch,
                                                   nn::Module& model, nn::Optimizer& optimizer, Progress& progress) {
  int64_t chosen = -1;  // -1: nothing to resume from
  absl::Status rank0_error;
  if (job.pg->rank() == 0) {
    std::vector<std::string> rejected;
    auto found = FindLatestGoodCheckpoint(o.checkpoint_dir, &rejected);
    for (const std::string& r : rejected) progress.Print(absl::StrCat("refusing damaged checkpoint ", r));
    if (!found.ok()) {
      rank0_error = found.status();
      chosen = -2;
    } else if (found->has_value()) {
      chosen = (*found)->progress.global_step;
      if ((*found)->version < kCheckpointVersion) {
        progress.Print(absl::StrCat(
            "notice: ", (*found)->path, " is in checkpoint format version ", (*found)->version,
            (*found)->version < 2 ? " (no checksum of its trainer state, no DDP bucket layout)"
                                  : " (no DDP bucket layout: at 3+ ranks the resumed run equals an uninterrupted "
                                    "one only up to the order of a sum, docs/exactness.md)",
            "; it loads, and new checkpoints are written in version ", kCheckpointVersion));
      }
    }
  }
  Tensor choice = Tensor::FromVector<int64_t>({chosen}, {1}, job.device);
  RETURN_IF_ERROR(job.pg->Broadcast(choice, 0)->Wait());
  chosen = choice.ToVector<int64_t>()[0];
  if (chosen == -2) {
    if (job.pg->rank() == 0) return rank0_error;
    return absl::AbortedError("rank 0 found no good checkpoint");
  }
  if (chosen == -1) {
    if (job.pg->rank() == 0) {
      progress.Print(absl::StrCat("--resume: no checkpoint in ", o.checkpoint_dir, " yet; starting from scratch"));
    }
    return TrainingProgress{};
  }
  const std::string path = CheckpointPath(o.checkpoint_dir, chosen);
  auto loaded =
      LoadTrainingCheckpoint(path, o.TrajectorySettings(job.dp().size()), steps_per_epoch, model, optimizer);
  RETURN_IF_ERROR(AgreeOnStatus(job, loaded.status(), "loading the checkpoint"));
  if (job.pg->rank() == 0) {
    progress.Print(absl::StrFormat("resumed from %s: epoch %d, batch %d, step %d", path, loaded->epoch + 1,
                                   loaded->batch_in_epoch, loaded->global_step));
  }
  return loaded;
}

nn::Module& TrainedModel(const Setup& s) {
  if (s.fsdp) return *s.fsdp;
  if (s.tp) return *s.tp;
  return *s.model;
}

absl::Status SplitModel(const TrainOptions& o, const Job& job, Setup& s) {
  ASSIGN_OR_RETURN(s.tp, dist::tensor_parallel::TensorParallelMlp::Create(*s.model, job.tensor));
  std::unique_ptr<nn::Optimizer> shards = MakeOptimizer(o, s.tp->Parameters());
  shards->SetComputeCopies(s.tp->ComputeCopies());  // none under fp32
  RETURN_IF_ERROR(s.tp->LoadOptimizerState(s.optimizer->StateTensors(), *shards));  // a resumed state, sliced
  RETURN_IF_ERROR(s.optimizer->LoadStateTensors({}));
  s.full_optimizer = std::move(s.optimizer);
  s.optimizer = std::move(shards);
  return absl::OkStatus();
}

// --zero=1|2: the optimizer becomes ZeRO's, sharded over the ranks inside DDP (docs/zero.md). s.optimizer
// stays as the unsharded vessel checkpoints read and write: here it hands a resumed state to the shards, and
// it holds no state while training.
absl::Status ShardOptimizer(const TrainOptions& o, Setup& s) {
  auto factory = [o](std::vector<autograd::Variable> params) { return MakeOptimizer(o, std::move(params)); };
  ASSIGN_OR_RETURN(s.zero, dist::zero::ZeroRedundancyOptimizer::Attach(*s.ddp, factory, s.gradient_shards,
                                                                        {.in_backward = o.optimizer_in_backward}));
  RETURN_IF_ERROR(s.zero->LoadConsolidatedStateTensors(s.optimizer->StateTensors()));
  // bf16: ZeRO moved the compute copies into its flat buffers; the vessel, which never steps, lets go of the
  // old ones (else a rank would hold a second bfloat16 copy of the model beside plain DDP's one).
  s.optimizer->SetComputeCopies({});
  return s.optimizer->LoadStateTensors({});
}

// --optimizer_in_backward: one optimizer per DDP bucket, each stepped during backward as soon as its bucket's
// average has arrived (dist/accel/fused_optimizer); the vessel hands over a resumed state and steps nothing.
absl::Status StepInsideBackward(const TrainOptions& o, Setup& s) {
  const nn::Module& model = *s.model;
  auto factory = [o, &model](std::vector<autograd::Variable> params) {
    std::unique_ptr<nn::Optimizer> opt = MakeOptimizer(o, std::move(params));
    opt->SetComputeCopies(model.ComputeCopies());  // bf16: the bucket's copies, written by the same pass
    return opt;
  };
  ASSIGN_OR_RETURN(s.fused, dist::FusedOptimizer::Attach(*s.ddp, factory, {.in_backward = true}));
  RETURN_IF_ERROR(s.fused->LoadStateTensorsOver(s.model->Parameters(), s.optimizer->StateTensors()));
  return s.optimizer->LoadStateTensors({});
}

// --zero=3: the model sharded layer by layer (it replaces DDP); the vessel hands over a resumed state.
absl::Status ShardModel(const TrainOptions& o, const Job& job, Setup& s) {
  auto factory = [o](std::vector<autograd::Variable> params) { return MakeOptimizer(o, std::move(params)); };
  // --trace: each layer's compute, all_gathers and reduce_scatter (dist/parallel/zero/fully_sharded.h).
  ASSIGN_OR_RETURN(s.fsdp, dist::zero::FullyShardedDataParallel::Create(s.model, job.data, factory,
                                                                        {.tracer = s.tracer.get()}));
  RETURN_IF_ERROR(s.fsdp->LoadConsolidatedStateTensors(s.optimizer->StateTensors()));
  // bf16: the vessel never steps under ZeRO-3 (each layer's optimizer writes its shard's bfloat16 copy); it
  // lets go of the model's whole copies, which the sharding replaced with empty ones.
  s.optimizer->SetComputeCopies({});
  return s.optimizer->LoadStateTensors({});
}

absl::StatusOr<std::string> MemoryTable(const TrainOptions& o, const Job& job, const Setup& s) {
  dist::zero::RankMemory mine;
  if (s.fsdp) {
    mine = dist::zero::HeldBy(*s.fsdp);
  } else if (s.zero) {
    mine = dist::zero::HeldBy(*s.zero);
  } else if (s.ddp) {
    std::vector<const nn::Optimizer*> per_bucket;  // --optimizer_in_backward: where the state is
    if (s.fused) {
      for (const auto& opt : s.fused->optimizers()) per_bucket.push_back(opt.get());
    }
    mine = dist::zero::HeldBy(*s.ddp, *s.optimizer, per_bucket);
  } else {
    return std::string();  // a rung of the ladder: not measured
  }
  mine.peak = dist::zero::PeakAbove(job.device, s.memory_baseline);
  return dist::zero::GatherMemoryTable(
      *job.pg, mine,
      absl::StrCat("memory per rank, --zero=", o.zero, " (bytes of tensors held between steps; peak: the most "
                   "live tensor bytes at once so far, above the loaded data, by the allocator):"));
}

autograd::Variable DdpForward(Setup& s, const autograd::Variable& input, bool sync) {
  if (s.rung) return s.rung->Forward(input, sync);  // records its own "forward" span
  dist::Tracer::Span span = dist::Tracer::MaybeScope(s.tracer.get(), "forward");
  if (s.fsdp) {  // --zero=3: a backward under NoSync adds each layer's gradient into its whole sum
    if (sync) return s.fsdp->Forward(input);
    dist::zero::FullyShardedDataParallel::NoSyncGuard no_sync = s.fsdp->NoSync();  // only the Forward decides
    return s.fsdp->Forward(input);
  }
  if (sync) return s.ddp->Forward(input);
  dist::DistributedDataParallel::NoSyncGuard no_sync = s.ddp->NoSync();  // only the Forward decides: ddp.h
  return s.ddp->Forward(input);
}

absl::Status FinishBackward(Setup& s) {
  if (s.fsdp) return s.fsdp->status();
  if (s.tp) RETURN_IF_ERROR(s.tp->status());  // a tensor-parallel all_reduce failed
  return s.rung ? s.rung->FinishBackward() : s.ddp->status();
}

std::string DescribeDdp(const Setup& s) {
  if (s.rung) return s.rung->Describe();
  if (s.fsdp) return s.fsdp->ShardTable();
  if (s.tp) return absl::StrCat(s.tp->Describe(s.loader->options().batch_size), s.ddp->BucketTable(),
                                s.zero ? s.zero->ShardTable() : "");
  if (s.zero) return absl::StrCat(s.ddp->BucketTable(), s.zero->ShardTable());
  return s.copy_engines ? absl::StrCat(s.ddp->BucketTable(), s.copy_engines->Describe()) : s.ddp->BucketTable();
}

std::vector<int64_t> AllReduceBytes(const Setup& s) {
  if (s.rung) return s.rung->AllReduceBytes();
  if (s.fsdp) return s.fsdp->UnitBytes();  // the layers' all-gathers
  std::vector<int64_t> bytes;
  for (int b = 0; b < s.ddp->reducer().num_buckets(); ++b) bytes.push_back(s.ddp->reducer().BucketBytes(b));
  return bytes;
}

}  // namespace tinyddp::examples
