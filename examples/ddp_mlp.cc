// ddp_mlp: trains an MLP on Fashion-MNIST with DistributedDataParallel, end to end. The program a
// newcomer runs first:
//
//   ./bazelw run //examples:ddp_mlp                 # one rank per GPU over NCCL, or 2 CPU ranks over Gloo
//   ./bazelw run //examples:ddp_mlp -- --help       # the flags (docs/ddp_mlp.md explains the output)
//
// Read it top to bottom: it is the spine of a data-parallel training script, the C++ twin of a
// torch.distributed + DDP script. Every rank runs this same program on its own shard of the data:
//
//   main       flags -> start workers if nobody else did (SpawnElasticWorkersIfNeeded) -> RunWorker
//   RunWorker  join the job (InitProcessGroup: NCCL on GPUs, Gloo on CPUs) -> Train
//   Train      data -> model -> (resume) -> DDP -> for each epoch:   (what comes before DDP: train_setup.h)
//                for each batch (or --grad_accum_steps of them): the step's learning rate, then TrainStep,
//                PyTorch's five lines (zero_grad, forward, loss, backward: DDP all_reduces the gradient
//                buckets while it runs, optimizer step), log
//                then: evaluate on every rank's shard, combine with all_reduce, log, checkpoint
//              told to stop (SIGTERM, SIGUSR1) with a --checkpoint_dir: every rank stops after the same step,
//              checkpoints, and the run exits with 75 (Preemption; docs/clusters.md, "Preemption")
// --ddp picks the DDP: the production DistributedDataParallel (full, the default) or a lower rung of the
// ladder that builds it up (naive, flat, bucketed: dist/ladder, docs/ddp_ladder.md); a step makes the same
// three calls to either (DdpForward, Backward, FinishBackward: train_setup.h). On GPUs DDP's buckets go
// through the copy-engine hook (dist/accel/copy_engine), which the bucket table announces per bucket.
//
// The pieces, and where they are defined (the includes are the table of contents):
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"
#include "autograd/engine.h"                       // Backward
#include "base/fault_injection.h"                  // MaybeInjectFault (TINYDDP_FAULT, for failure tests)
#include "base/status_macros.h"
#include "data/data_loader.h"                      // DataLoader: batches with prefetch, on the device
#include "data/fashion_mnist.h"                    // LoadFashionMnist (checked before workers start)
#include "dist/accel/copy_engine/copy_engine_hook.h"  // CopyEngineHook: two GPUs' large buckets on the copy engines
#include "dist/accel/graph/graphed_step.h"         // GraphedStep (--cuda_graph): the step as one CUDA graph
#include "dist/ddp/bf16_compress_hook.h"            // Bf16CompressHook (--comm_hook=bf16)
#include "dist/ddp/ddp.h"                          // DistributedDataParallel, DdpOptions: --ddp=full
#include "dist/init.h"                             // InitProcessGroup: env -> store -> NCCL or Gloo group
#include "dist/ladder/ladder.h"                    // CreateDataParallel: --ddp=naive|flat|bucketed, the rungs
#include "dist/elastic/spawn.h"                    // SpawnElasticWorkersIfNeeded: restarts, limits, observers
#include "dist/elastic/in_place/keep_going.h"       // KeepGoingAfterLoss (--min_replicas): survivors not stopped
#include "dist/elastic/in_place/min_replicas.h"     // CheckMinReplicas: what --min_replicas can keep going
#include "dist/engines/engines.h"                  // UseClusterEngine: srun's, mpirun's, a pod's variables -> env://
#include "dist/observe/debug_check/debug_check.h"   // AttachDebugCheck (TINYDDP_DISTRIBUTED_DEBUG=DETAIL)
#include "dist/observe/fault/collective_fault.h"     // AttachCollectiveFaults (TINYDDP_FAULT point=collective)
#include "dist/observe/blame/blame.h"                // Blame: which rank failed first, for spawn
#include "dist/observe/blame/error_file.h"           // RecordWorkerFailure: why, for the launcher's Blame
#include "dist/observe/flight_recorder/job_records.h"  // JobRecords: the flight recorder's verdict for spawn
#include "dist/observe/flight_recorder/recorder.h"  // AttachFlightRecorder: every rank's last collectives
#include "dist/observe/trace/trace.h"              // Tracer (--trace)
#include "dist/observe/trace/traced_comm_hook.h"   // TracedCommHook: each bucket's collective in the trace
#include "dist/parallel/pipeline/bubble.h"       // --pp: each rank's measured idle fraction, the picture's data
#include "dist/parallel/zero/fully_sharded.h"     // ZeRO-3 (--zero=3): every layer sharded, gathered when used
#include "dist/parallel/zero/gradient_shards.h"   // ZeRO-2 (--zero=2): only this rank's block of the gradients
#include "dist/parallel/zero/memory_table.h"      // StartPeak: what each rank holds, one table (MemoryTable)
#include "dist/parallel/zero/reduce_scatter_hook.h" // ZeRO-1 (--zero=1): buckets reduce-scattered
#include "dist/parallel/zero/zero_optimizer.h"     // ZeRO-1/2: the sharded optimizer, memory, consolidated state
#include "dist/process_group/exit_on_failure.h"    // SetLastWordsBeforeCollectiveExit: the error file
#include "dist/worker/env.h"                       // IsWorker, ReadWorkerEnv (restart_count)
#include "examples/internal/durable_file.h"        // IsPermanent, kPermanentFailureExitCode: not restarted
#include "examples/internal/evaluate.h"            // EvaluateShard, AllReduceEvalSums
#include "examples/internal/in_place_training.h"   // RunInPlaceWorker (--min_replicas): lose a rank, keep training
#include "examples/internal/loss_window.h"         // LossWindow: step losses on the device, non-finite check
#include "examples/internal/memory_estimate.h"     // CheckMemoryFits: refuse a run too large for this host
#include "examples/internal/metrics_writer.h"      // MetricsWriter (--metrics_out): JSON lines + SVG plot
#include "examples/internal/preemption.h"          // Preemption: SIGTERM/SIGUSR1 -> one checkpoint, exit 75
#include "examples/internal/progress.h"            // Progress: the live bar, or plain lines
#include "examples/internal/train_checkpoint.h"    // SaveTrainingCheckpoint
#include "examples/internal/train_options.h"       // TrainOptions, ParseTrainOptions: the flags
#include "examples/internal/train_setup.h"         // Job, Setup, BuildSetup, ResumeOnEveryRank: before training
#include "nn/device_lr.h"                          // DeviceLr (--cuda_graph): the schedule on the device
#include "tensor/cpu_isa.h"                        // CpuIsaSummary: which CPU kernels run
#include "tensor/cuda_device.h"                    // CurrentDevice, BuiltWithCuda
#include "tensor/ops.h"                            // AddInto (loss accumulation on the device)
#include "tensor/stream.h"                         // Stream: a compute stream of our own on the GPU
#include "tools/timeline/pipeline_svg.h"           // WritePipelineSvg: --trace's picture under --pp
#include "tools/timeline/timeline_svg.h"           // WriteTimelineSvg: --trace's picture

namespace tinyddp::examples {
namespace {

using autograd::Variable;

// --- Reporting: what rank 0 prints and writes (the other ranks print only errors) -----------------

struct Report {
  bool lead = false;  // rank 0
  Progress progress;
  std::unique_ptr<MetricsWriter> metrics;  // --metrics_out; rank 0 only
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double train_seconds = 0;  // in the training loops (not evaluation or checkpoints), and their steps:
  int64_t train_steps = 0;   // the step time the done line reports, e.g. to compare --ddp rungs
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
};

void PrintHeader(const TrainOptions& options, const Job& job, const Setup& setup, Progress& progress) {
  const int replicas = job.dp().size();  // data-parallel: the world, or under --tp/--pp its mesh's columns
  const int64_t parameters = setup.pipeline ? setup.pipeline->TotalParameters()
                             : setup.fsdp   ? setup.fsdp->Memory().parameters
                                            : setup.model->NumParameters();
  progress.Print(absl::StrFormat(
      "ddp_mlp: MLP %s (%d parameters), %s over %s on %s, %s: %d train / %d test examples",
      absl::StrJoin(setup.dims, "-"), parameters,
      job.tensor && job.pipeline
                     ? absl::StrFormat("%d ranks as %d data-parallel replicas x %d pipeline stages x %d tensor-parallel",
                                       job.pg->size(), replicas, job.pipeline->size(), job.tensor->size())
      : job.tensor   ? absl::StrFormat("%d ranks as %d data-parallel replicas x %d tensor-parallel", job.pg->size(),
                                       replicas, job.tensor->size())
      : job.pipeline ? absl::StrFormat("%d ranks as %d data-parallel replicas x %d pipeline stages", job.pg->size(),
                                       replicas, job.pipeline->size())
                     : absl::StrFormat("%d rank(s)", job.pg->size()),
      job.pg->backend_name(),
      job.device.ToString(), options.dataset, setup.datasets.train->Size(), setup.datasets.test->Size()));
  const std::string accumulation =
      options.grad_accum_steps == 1
          ? ""
          : absl::StrFormat(" x %d accumulated (%d examples per optimizer step)", options.grad_accum_steps,
                            options.batch_size * replicas * options.grad_accum_steps);
  progress.Print(absl::StrFormat("  %d epochs x %d steps, batch %d per %s (%d global)%s, %s, lr %s%s, --ddp=%s%s",
                                 options.epochs, setup.steps_per_epoch, options.batch_size,
                                 job.tensor || job.pipeline ? "replica" : "rank",
                                 options.batch_size * replicas, accumulation, options.optimizer,
                                 setup.schedule->ToString(),
                                 options.precision == "bf16" ? ", bf16 mixed precision" : "", options.ddp,
                                 std::vector<std::string>{"", setup.stage_zero ? ", each stage's optimizer sharded "
                                                          "over its replicas by ZeRO-1" : ", optimizer sharded by ZeRO-1",
                                                          ", optimizer and gradients sharded by ZeRO-2",
                                                          ", parameters, gradients and optimizer sharded by "
                                                          "ZeRO-3"}[options.zero]));
  if (job.device.is_cpu()) progress.Print("  " + CpuIsaSummary());  // which CPU kernels run (tensor/cpu_isa.h)
  if (setup.pipeline) {  // --pp: no DDP; the table below shows the stages and the schedule
    progress.Print(absl::StrFormat(
        "  pipeline: --pp_schedule=%s, %d microbatches of %d rows per step, gradients %s over the %d replica(s) "
        "after the last backward (dist/parallel/pipeline)",
        options.pp_schedule, setup.pipeline->runtime().schedule().num_microbatches(),
        options.batch_size / setup.pipeline->runtime().schedule().num_microbatches(),
        setup.stage_zero ? "reduce-scattered (ZeRO-1: each rank steps its block, then all-gathers)" : "averaged",
        replicas));
  }
  if (options.optimizer_in_backward) {
    progress.Print(options.zero == 0 ? "  optimizer inside backward: one per DDP bucket, each stepped as soon as its "
                                       "bucket's average has arrived (dist/accel/fused_optimizer)"
                                     : "  optimizer inside backward: each bucket's shard stepped as soon as its "
                                       "reduce-scatter has landed, the all-gathers at the end of backward "
                                       "(dist/parallel/zero)");
  }
}

// Collective: rank 0 opens --metrics_out (appending when a resumed run continues); every rank learns
// whether that worked.
absl::StatusOr<std::unique_ptr<MetricsWriter>> OpenMetrics(const TrainOptions& options, const Job& job,
                                                           const TrainingProgress& at) {
  std::unique_ptr<MetricsWriter> metrics;
  absl::Status opened;
  if (job.pg->rank() == 0 && !options.metrics_out.empty()) {
    auto writer = MetricsWriter::Open(options.metrics_out, /*append=*/options.resume && at.global_step > 0);
    if (writer.ok()) metrics = *std::move(writer);
    opened = writer.status();
  }
  RETURN_IF_ERROR(AgreeOnStatus(job, opened, "opening --metrics_out"));
  return metrics;
}

// Collective (every rank logs at the same steps): the loss since the last log, averaged over steps and
// ranks, added to the epoch's tally; rank 0 prints it and records it in --metrics_out.
absl::Status LogLoss(const Job& job, LossWindow& window, double lr, TrainingProgress& at, Report& report) {
  const int64_t steps = window.steps();
  ASSIGN_OR_RETURN(const double sum, window.Flush(*job.pg));  // stops a run whose loss is NaN or Inf
  at.epoch_loss_sum += sum;
  at.epoch_loss_count += static_cast<double>(steps);
  if (!report.lead) return absl::OkStatus();
  const double mean = sum / static_cast<double>(steps);
  report.progress.LogStep(at.batch_in_epoch, mean, lr);
  if (report.metrics) {
    RETURN_IF_ERROR(
        report.metrics->WriteStep({at.global_step, at.epoch, mean, lr, report.progress.SamplesPerSecond()}));
  }
  return absl::OkStatus();
}

// Collective (--join), after an epoch: how many steps each rank trained and how many it shadowed, its data
// having run out (one small all_reduce of every rank's two counts); rank 0 prints them.
absl::Status ReportJoin(const Job& job, const Setup& setup, Report& report) {
  const int n = job.dp().size(), me = job.dp().rank();
  std::vector<int64_t> counts(2 * static_cast<size_t>(n), 0);
  counts[2 * me] = setup.join->steps_trained();
  counts[2 * me + 1] = setup.join->steps_shadowed();
  Tensor all = Tensor::FromVector<int64_t>(counts, {2 * n}, job.device);
  RETURN_IF_ERROR(job.dp().AllReduce(all, dist::ReduceOp::kSum)->Wait());
  counts = all.ToVector<int64_t>();
  std::vector<std::string> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(absl::StrFormat("rank %d %d/%d", r, counts[2 * r], counts[2 * r + 1]));
  if (report.lead) {
    report.progress.Print(absl::StrCat("join: steps trained/shadowed this epoch (a rank whose data ran out shadows "
                                       "the others' all_reduces with zeros): ", absl::StrJoin(ranks, ", ")));
  }
  return absl::OkStatus();
}

// Collective, after an epoch: every rank evaluates its unpadded shard of the test set, one all_reduce
// combines the sums, and rank 0 prints and records the epoch's line.
absl::StatusOr<EvalMetrics> EvaluateEpoch(const TrainOptions& options, const Job& job, const Setup& setup,
                                          const TrainingProgress& at, int64_t epoch, bool epoch_done, Report& report) {
  // ZeRO-3: gathered per layer; --tp: the ranks of a row evaluate the same shard together, and the sums
  // are combined down the data-parallel column only (a row's ranks hold the same sums).
  // --trace records the training steps: ZeRO-3's and --tp's layers would record evaluation's forwards too.
  if (setup.tracer) setup.tracer->set_enabled(false);
  absl::StatusOr<EvalSums> evaluated =
      EvaluateShard(TrainedModel(setup), *setup.datasets.test, setup.eval_indices, job.device);
  if (setup.tracer) setup.tracer->set_enabled(true);
  ASSIGN_OR_RETURN(const EvalSums local, std::move(evaluated));
  if (setup.pipeline) RETURN_IF_ERROR(setup.pipeline->status());  // --pp: evaluation's transfers
  ASSIGN_OR_RETURN(const EvalMetrics eval, AllReduceEvalSums(job.dp(), job.device, local));
  const double train_loss = at.epoch_loss_count > 0 ? at.epoch_loss_sum / at.epoch_loss_count : std::nan("");
  if (report.lead) {
    report.progress.Print(
        absl::StrFormat("epoch %d/%d%s: train loss %.4f | test loss %.4f, accuracy %.2f%% (%d examples) | %.1fs",
                        epoch + 1, options.epochs, epoch_done ? "" : " (stopped at --max_steps)", train_loss, eval.loss,
                        100 * eval.accuracy, eval.count, report.Seconds()));
    if (report.metrics) {
      RETURN_IF_ERROR(
          report.metrics->WriteEpoch({epoch, at.global_step, train_loss, eval.loss, eval.accuracy, report.Seconds()}));
    }
  }
  return eval;
}

// --pp: the stages gathered into one process's model and optimizer state (collective over each pipeline), which
// rank 0 writes: the files are one process's, and resume at any --pp.
absl::Status CheckpointPipeline(const TrainOptions& options, const Job& job, const Setup& setup,
                                const TrainingProgress& at, Report& report) {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  RETURN_IF_ERROR(GatherStages(options, setup, &model, &optimizer));
  absl::Status saved_ok;
  if (report.lead) {
    absl::StatusOr<std::string> saved = SaveTrainingCheckpoint(
        options.checkpoint_dir, *model, *optimizer, at, options.TrajectorySettings(job.dp().size()),
        options.keep_checkpoints);
    if (saved.ok()) report.progress.Print(absl::StrCat("  checkpoint: ", *saved));
    saved_ok = saved.status();
  }
  return AgreeOnStatus(job, saved_ok, "writing the checkpoint");
}

// Collective: rank 0 writes the checkpoint (every rank holds the same weights and optimizer state) and
// every rank learns whether that worked.
absl::Status CheckpointOnEveryRank(const TrainOptions& options, const Job& job, Setup& setup,
                                   const TrainingProgress& at, Report& report) {
  if (options.checkpoint_dir.empty()) return absl::OkStatus();
  if (setup.pipeline) return CheckpointPipeline(options, job, setup, at, report);
  // ZeRO-1: every rank gathers the shards into the unsharded optimizer (collective), which is saved as
  // plain DDP's is, so the checkpoint resumes with or without ZeRO (at the number of ranks that wrote it: the
  // settings check refuses another; --init_from takes its model at any number).
  // ZeRO-3 also gathers the model's parameters first (they are freed again by the next forward).
  dist::zero::ZeroRedundancyOptimizer* zero = setup.zero.get();
  if (setup.fsdp) RETURN_IF_ERROR(setup.fsdp->GatherFullParameters());
  if (zero != nullptr || setup.fsdp) {
    ASSIGN_OR_RETURN(const nn::TensorMap full,
                     zero ? zero->ConsolidatedStateTensors() : setup.fsdp->ConsolidatedStateTensors());
    RETURN_IF_ERROR(setup.optimizer->LoadStateTensors(full));
  }
  // --optimizer_in_backward: the per-bucket optimizers' state, named as the whole optimizer names it.
  if (setup.fused) RETURN_IF_ERROR(setup.optimizer->LoadStateTensors(setup.fused->StateTensorsOver(setup.model->Parameters())));
  // --tp: each row gathers its layers' shards into the whole model and optimizer (collective over the row;
  // under ZeRO the column's shards were consolidated into the row's optimizer first, just above).
  if (setup.tp) {
    RETURN_IF_ERROR(setup.tp->GatherInto(*setup.model));
    ASSIGN_OR_RETURN(const nn::TensorMap whole, setup.tp->GatherOptimizerState(*setup.optimizer));
    RETURN_IF_ERROR(setup.full_optimizer->LoadStateTensors(whole));
  }
  nn::Optimizer& whole_optimizer = setup.full_optimizer ? *setup.full_optimizer : *setup.optimizer;
  absl::Status saved_ok;
  if (report.lead) {
    TrainingProgress here = at;  // and DDP's bucket layout, which a resumed run must start from to stay exact
    if (setup.ddp) here.bucket_order = setup.ddp->reducer().LayoutOrder();
    absl::StatusOr<std::string> saved =
        SaveTrainingCheckpoint(options.checkpoint_dir, *setup.model, whole_optimizer, here,
                               options.TrajectorySettings(job.dp().size()), options.keep_checkpoints);
    if (saved.ok()) report.progress.Print(absl::StrCat("  checkpoint: ", *saved));
    saved_ok = saved.status();
  }
  if (zero != nullptr || setup.fsdp || setup.fused) RETURN_IF_ERROR(setup.optimizer->LoadStateTensors({}));  // the shards hold it
  if (setup.full_optimizer) RETURN_IF_ERROR(setup.full_optimizer->LoadStateTensors({}));
  if (setup.fsdp) setup.fsdp->ReleaseFullParameters();
  return AgreeOnStatus(job, saved_ok, "writing the checkpoint");
}

// --pp, at the end: each pipeline rank's idle fraction in the last step (measured from its compute intervals,
// dist/parallel/pipeline/bubble.h) beside the formula, and with --trace the picture of that step (FILE.pipeline.svg).
// Collective over each pipeline; rank 0 prints its own pipeline's.
absl::Status ReportBubble(const TrainOptions& options, const Job& job, const Setup& setup, Report& report) {
  dist::pipeline::PipelineRuntime& runtime = setup.pipeline->runtime();
  ASSIGN_OR_RETURN(const auto computes, dist::pipeline::GatherComputes(job.pipeline.get(), runtime.last_step()));
  if (!report.lead) return absl::OkStatus();
  const dist::pipeline::StepIdle idle = dist::pipeline::IdleOf(computes);
  std::vector<std::string> ranks;
  for (size_t r = 0; r < idle.idle.size(); ++r) ranks.push_back(absl::StrFormat("rank %d %.1f%%", r, 100 * idle.idle[r]));
  report.progress.Print(absl::StrFormat(
      "pipeline bubble, last step (%.2f ms from the first stage's first compute to the last's last), idle: %s; "
      "mean %.1f%%, formula %.1f%% (dist/parallel/pipeline/bubble.h)%s",
      idle.window_us / 1000, absl::StrJoin(ranks, ", "), 100 * idle.mean_idle, 100 * runtime.schedule().FormulaBubble(),
      job.device.is_cuda() ? "; on GPUs these are the host's times of queueing the work, not the kernels' (--trace "
                             "has the kernels')"
                           : ""));
  if (!options.trace.empty()) {
    const std::string svg = absl::StrCat(std::string(absl::StripSuffix(options.trace, ".json")), ".pipeline.svg");
    const absl::Status drawn = dist::WritePipelineSvg(
        computes, svg, absl::StrFormat("--pp=%d --pp_schedule=%s, %d microbatches: the last step, measured",
                                       options.pp, options.pp_schedule, runtime.schedule().num_microbatches()));
    report.progress.Print(absl::StrCat("pipeline picture: ", drawn.ok() ? svg : std::string(drawn.message())));
  }
  return absl::OkStatus();
}

// Outputs that need the whole run and the last line, then every rank leaves together (rank 0 may host
// the job's store, which the others still need until then).
absl::Status Finish(const TrainOptions& options, const Job& job, const Setup& setup, const TrainingProgress& at,
                    const EvalMetrics& last_eval, Report& report) {
  if (report.metrics) {
    ASSIGN_OR_RETURN(const std::string plot, report.metrics->Finish());
    report.progress.Print(absl::StrCat("metrics: ", options.metrics_out, ", plot: ", plot));
  }
  if (setup.pipeline) RETURN_IF_ERROR(ReportBubble(options, job, setup, report));  // collective over the pipeline
  if (setup.tracer) {
    RETURN_IF_ERROR(setup.tracer->WriteChromeTrace(job.pg.get(), options.trace));  // collective: rank 0 writes
    if (report.lead && !setup.pipeline) {
      // And its picture beside it (FILE.svg): the last two steps, each all_reduce labelled with its bytes.
      dist::TraceSvgOptions svg;
      svg.bucket_bytes = AllReduceBytes(setup);
      svg.title = absl::StrCat("DDP step timeline, --ddp=", options.ddp);
      if (setup.fsdp) {  // ZeRO-3: each layer's all_gathers and reduce_scatter, its bytes whole
        svg.title = "ZeRO-3 step timeline";
        svg.comm_unit = "layer";
      } else if (setup.tp) {  // --tp: each Linear's all_reduce (g after a pair, f before its second layer's dx)
        svg.title = absl::StrCat("Tensor parallelism step timeline, --tp=", options.tp);
        svg.comm_unit = "layer";
        svg.bucket_bytes = setup.tp->AllReduceBytes(options.batch_size);
      }
      const absl::StatusOr<std::string> drawn = dist::WriteTimelineSvg(options.trace, svg);
      report.progress.Print(absl::StrCat("trace: ", options.trace, " (open in https://ui.perfetto.dev), timeline: ",
                                    drawn.ok() ? *drawn : std::string(drawn.status().message())));
    } else if (report.lead) {  // --pp: each rank's F, B (and W) spans; the picture is the pipeline's, above
      report.progress.Print(absl::StrCat("trace: ", options.trace, " (open in https://ui.perfetto.dev)"));
    }
  }
  if (report.lead && setup.graphed) {  // --cuda_graph: whether the graph path was taken, and if not, why
    report.progress.Print(absl::StrFormat("cuda graph: %d step(s) replayed, %d run eagerly by the graphed step; at the "
                                     "end: %s", setup.graphed->replays(), setup.graphed->eager_steps(),
                                     setup.graphed->ModeName()));
  }
  if (report.lead && last_eval.count == 0) {
    report.progress.Print(
        absl::StrFormat("nothing to train: the run is already at step %d (--epochs=%d, --max_steps=%d)", at.global_step,
                        options.epochs, options.max_steps));
  } else if (report.lead) {
    report.progress.Print(absl::StrFormat("done: %d steps, test accuracy %.2f%%, %.1fs (%.2f ms per training step)",
                                     at.global_step, 100 * last_eval.accuracy, report.Seconds(),
                                     1000 * report.train_seconds / std::max<int64_t>(1, report.train_steps)));
  }
  return job.pg->Barrier()->Wait();
}

// --- Training --------------------------------------------------------------------------------------

// Up to `k` next batches of the epoch (fewer at its end): what one optimizer step trains on. Empty at
// the end of the epoch.
std::vector<data::Batch> NextBatches(data::DataLoader& loader, int64_t k) {
  std::vector<data::Batch> batches;
  while (static_cast<int64_t>(batches.size()) < k) {
    std::optional<data::Batch> batch = loader.Next();
    if (!batch) break;
    batches.push_back(*std::move(batch));
  }
  return batches;
}

// --- One training step: PyTorch's five lines, and the helpers around them ------------------------------

// The learning rate of step `step` (--lr_schedule), set before the step runs: on the host, or with
// --cuda_graph advanced on the device, inside the recorded step (nn/device_lr.h). ZeRO-1's shards follow.
void SetLearningRate(Setup& setup, int64_t step) {
  if (setup.device_lr) {
    setup.device_lr->Advance();  // --cuda_graph: the schedule moves on the device, also inside the graph
  } else {
    setup.optimizer->set_lr(setup.schedule->LrAt(step));
  }
  if (setup.zero) setup.zero->SetLr(setup.optimizer->lr());
  if (setup.stage_zero) setup.stage_zero->SetLr(setup.optimizer->lr());  // --pp --zero=1
  if (setup.fsdp) setup.fsdp->SetLr(setup.optimizer->lr());
  if (setup.fused && !setup.device_lr) setup.fused->SetLr(setup.optimizer->lr());
}

// loss.backward(), traced. `share`: the seed of the backward, this micro-batch's share of the step's
// examples (1 without accumulation). DDP all_reduces the gradient buckets while it runs (bucketed, full);
// FinishBackward completes the average (naive, flat: all of the communication happens there). A bucket
// whose all_reduce failed (a peer died, or froze past --timeout) left gradients that are not averages: stop
// with its error rather than step on them (PyTorch raises from backward()).
absl::Status Backward(Setup& setup, const Variable& loss, int64_t step, double share = 1) {
  {
    dist::Tracer::Span span = dist::Tracer::MaybeScope(setup.tracer.get(), "backward", step);
    autograd::Backward(loss, share == 1 ? Tensor() : Tensor::Full(loss.shape(), share, loss.dtype(), loss.device()));
  }
  return FinishBackward(setup);
}

// optimizer.step(), traced. Under ZeRO each rank's shard already stepped inside Backward, and with
// --optimizer_in_backward each bucket's optimizer.
void OptimizerStep(Setup& setup, int64_t step) {
  if (setup.zero || setup.fsdp || setup.fused) return;
  dist::Tracer::Span span = dist::Tracer::MaybeScope(setup.tracer.get(), "optimizer", step);
  setup.optimizer->Step();
}

// One optimizer step, the five lines of every PyTorch training loop. DDP works inside three of them: its
// forward arms the reducer, backward averages the gradients over the ranks, and the optimizer then sees
// the same averaged gradients on every rank. Returns the loss, left on the device (reading it would wait
// for the GPU).
absl::StatusOr<Tensor> TrainStep(Setup& setup, const data::Batch& batch, int64_t step) {
  if (setup.pipeline) {  // --pp: the microbatches through this rank's stages, in the schedule's order
    setup.optimizer->ZeroGrad();
    ASSIGN_OR_RETURN(Tensor loss, setup.pipeline->TrainStep(batch.inputs, batch.labels));
    if (setup.stage_zero) {  // --zero=1: reduce-scatter, step this rank's block, all-gather (collective)
      dist::Tracer::Span span = dist::Tracer::MaybeScope(setup.tracer.get(), "optimizer", step);
      RETURN_IF_ERROR(setup.stage_zero->Step());
    } else {
      OptimizerStep(setup, step);
    }
    return loss;
  }
  setup.optimizer->ZeroGrad();                                         // optimizer.zero_grad()
  const Variable logits = DdpForward(setup, Variable(batch.inputs), /*sync=*/true);  // logits = ddp(x)
  const Variable loss = setup.loss_fn(logits, batch.labels);          // loss = loss_fn(logits, y)
  RETURN_IF_ERROR(Backward(setup, loss, step));                        // loss.backward()
  OptimizerStep(setup, step);                                          // optimizer.step()
  return loss.data();
}

// --grad_accum_steps: the same five lines over several micro-batches. All but the last run under no_sync
// (their backwards only add into .grad), and each one's mean loss is weighted by its share of the step's
// examples (the seed of its backward), so .grad ends as the mean over all of them - k micro-batches of b
// train like one batch of k*b, up to the order in which float sums are added. Returns the step's loss
// (the mean over its examples).
absl::StatusOr<Tensor> AccumulatingTrainStep(Setup& setup, const std::vector<data::Batch>& micro_batches,
                                             int64_t step) {
  int64_t examples = 0;
  for (const data::Batch& batch : micro_batches) examples += batch.size();
  setup.optimizer->ZeroGrad();
  Tensor step_loss;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const data::Batch& batch = micro_batches[i];
    const bool last = i + 1 == micro_batches.size();
    const double share = static_cast<double>(batch.size()) / static_cast<double>(examples);
    const Variable logits = DdpForward(setup, Variable(batch.inputs), /*sync=*/last);
    const Variable loss = setup.loss_fn(logits, batch.labels);
    RETURN_IF_ERROR(Backward(setup, loss, step, share));
    if (!step_loss.defined()) step_loss = Tensor::Zeros(loss.shape(), loss.dtype(), loss.device());
    ops::AddInto(step_loss, loss.data(), share);
  }
  OptimizerStep(setup, step);
  return step_loss;
}

// A failure test's poisoned batch (TINYDDP_FAULT=...,point=step,action=nan): its inputs become NaN, so the
// loss is not finite and the run must stop (LossWindow) unless --allow_nonfinite.
std::vector<data::Batch> Poisoned(std::vector<data::Batch> batches) {
  for (data::Batch& batch : batches) batch.inputs = ops::Scale(batch.inputs, std::nan(""));
  return batches;
}

// The learning rate of `step`, then TrainStep on `batches` (one batch, or --grad_accum_steps of them).
absl::StatusOr<Tensor> TrainOneStep(Setup& setup, const std::vector<data::Batch>& batches, int64_t step) {
  SetLearningRate(setup, step);
  if (batches.size() == 1) return TrainStep(setup, batches[0], step);
  return AccumulatingTrainStep(setup, batches, step);
}

// --cuda_graph: the whole step recorded into one CUDA graph after a few eager steps, then replayed
// (dist/accel/graph/graphed_step.h). Two things change for the step, not its results: the batch is copied
// into fixed buffers (DataLoader::NextInto), and the learning rate comes from the device (nn/device_lr.h),
// so that each replay follows the schedule. Where capture is impossible (CPU ranks, --trace, a rung below
// --ddp=full, --grad_accum_steps, --zero=1) the reason is printed once and the plain loop runs.
void SetUpCudaGraph(const TrainOptions& options, const Job& job, const TrainingProgress& at, Setup& setup,
                    Report& report) {
  dist::GraphedStepOptions graph_options;
  graph_options.log = [&report](const std::string& line) {
    if (report.lead) report.progress.Print(line);
  };
  graph_options.traced = setup.tracer != nullptr;  // --trace: every step runs eagerly, and the reason says so
  if (options.ddp != "full") {
    graph_options.eager_reason =
        absl::StrCat("--ddp=", options.ddp, " waits for its all_reduces on the host; --ddp=full records");
  } else if (options.grad_accum_steps != 1) {
    graph_options.eager_reason = "--grad_accum_steps runs several micro-batches per step; a graph replays one";
  } else if (options.zero != 0) {
    graph_options.eager_reason =
        absl::StrCat("ZeRO-", options.zero, " under a CUDA graph is not implemented (its sharded steps are not recorded)");
  } else if (options.tp != 1 || options.join) {
    graph_options.eager_reason = options.join ? "--join decides on the host whether each step trains or shadows"
                                              : "--tp under a CUDA graph is not implemented";
  }
  if (setup.fused) {  // --optimizer_in_backward: the per-bucket optimizers, rebuilt with DDP's buckets
    graph_options.rebuilt_optimizers = [&setup] {
      std::vector<const nn::Optimizer*> all;
      for (const auto& opt : setup.fused->optimizers()) all.push_back(opt.get());
      return all;
    };
  }
  auto graphed = std::make_unique<dist::GraphedStep>(
      job.device,
      [&setup] {
        return TrainOneStep(setup, {data::Batch{setup.static_inputs, setup.static_labels}}, /*step=*/0);
      },
      setup.ddp.get(), std::vector<const nn::Optimizer*>{setup.optimizer.get()}, std::move(graph_options));
  if (!graphed->eager_reason().empty()) return;  // said why; the eager loop it is
  setup.device_lr =
      std::make_unique<nn::DeviceLr>(*setup.schedule, options.epochs * setup.loader->num_batches(), job.device);
  setup.device_lr->SetStep(at.global_step);  // a resumed run continues the curve
  setup.optimizer->UseDeviceLr(setup.device_lr->lr());
  if (setup.fused) setup.fused->UseDeviceLr(setup.device_lr->lr());
  setup.static_inputs =
      Tensor::Empty({options.batch_size, setup.datasets.train->input_size()}, DType::kFloat32, job.device);
  setup.static_labels = Tensor::Empty({options.batch_size}, DType::kInt64, job.device);
  setup.graphed = std::move(graphed);
}

// One optimizer step on the next batch(es) of the epoch; nullopt at its end (or on a loader error: loader->status()).
// Eager: TrainStep on the loader's batch. --cuda_graph: the batch goes into the fixed buffers and the
// graphed step runs (eagerly while warming up, then replays); a smaller last batch runs eagerly on the
// buffers' first rows, since a graph replays fixed shapes, and so does a failure test's poisoned batch.
absl::StatusOr<std::optional<Tensor>> StepOnNextBatch(const TrainOptions& options, Setup& setup, int64_t step,
                                                      Report& report) {
  int64_t rows = 0;
  std::vector<data::Batch> batches;  // eager: --grad_accum_steps of them (fewer at the end of the epoch)
  if (setup.graphed) {
    rows = setup.loader->NextInto(setup.static_inputs, setup.static_labels);
    if (rows == 0) return std::optional<Tensor>();
  } else {
    batches = NextBatches(*setup.loader, options.grad_accum_steps);
    if (setup.join) {  // --join: every rank says whether it has a batch; none: the epoch is over for all
      if (batches.empty()) RETURN_IF_ERROR(setup.loader->status());
      ASSIGN_OR_RETURN(const dist::join::Turn turn, setup.join->Next(!batches.empty()));
      if (turn == dist::join::Turn::kAllDone) return std::optional<Tensor>();
      if (turn == dist::join::Turn::kShadow) {  // out of data: DDP's step with a zero gradient, then the
        SetLearningRate(setup, step);         // optimizer's on the others' average, so every rank stays equal
        RETURN_IF_ERROR(setup.join->Shadow(*setup.ddp, setup.optimizer.get(), setup.placeholder));
        return std::optional<Tensor>(Tensor());  // no loss of its own
      }
    }
    if (batches.empty()) return std::optional<Tensor>();
  }
  // Failure tests make a rank hang, exit or die here (TINYDDP_FAULT); "nan" poisons this batch.
  const bool poison = MaybeInjectFault("step", step) == FaultAction::kNonFinite;
  if (!setup.graphed) {
    ASSIGN_OR_RETURN(Tensor loss, TrainOneStep(setup, poison ? Poisoned(std::move(batches)) : batches, step));
    return std::optional<Tensor>(loss);
  }
  if (rows < options.batch_size || poison) {
    if (report.lead && !setup.said_partial_batch && !poison) {
      report.progress.Print(
          absl::StrFormat("cuda graph: the last batch of an epoch has %d rows, not %d: it runs eagerly "
                          "(a graph replays fixed shapes)",
                          rows, options.batch_size));
      setup.said_partial_batch = true;
    }
    std::vector<data::Batch> partial = {{setup.static_inputs.Rows(0, rows), setup.static_labels.Rows(0, rows)}};
    ASSIGN_OR_RETURN(Tensor loss, TrainOneStep(setup, poison ? Poisoned(std::move(partial)) : partial, step));
    return std::optional<Tensor>(loss);
  }
  ASSIGN_OR_RETURN(Tensor loss, setup.graphed->Run());
  return std::optional<Tensor>(loss);
}

// Starts epoch `epoch` at its first step not trained yet (mid-epoch after a resume).
void StartEpoch(const TrainOptions& options, const Job& job, int64_t epoch, Setup& setup, TrainingProgress& at,
                Report& report) {
  setup.loader->Reset(epoch);  // the shuffle of this epoch, a function of (seed, epoch)
  const int64_t first_batch = epoch == at.epoch ? at.batch_in_epoch : 0;  // in optimizer steps
  for (int64_t skip = 0; skip < first_batch * options.grad_accum_steps; ++skip) {  // trained before the resume
    if (!setup.loader->Next()) break;
  }
  if (first_batch == 0) at.epoch_loss_sum = at.epoch_loss_count = 0;     // a fresh epoch
  at.epoch = epoch;
  at.batch_in_epoch = first_batch;
  if (report.lead) {
    report.progress.BeginEpoch(epoch, options.epochs, at.steps_per_epoch, first_batch,
                          options.batch_size * job.dp().size() * options.grad_accum_steps);
  }
}

// A rank's whole run. Every rank runs the same collectives in the same order; only rank 0 reports.
// `preemption` (null: off) stops it at a step every rank agrees on, after a checkpoint.
absl::Status Train(const TrainOptions& options, const Job& job, Preemption* preemption) {
  const bool lead = job.pg->rank() == 0;
  Report report{lead, Progress(lead && ::isatty(::fileno(stdout)), stdout)};

  // 1. Data, model, optimizer (BuildSetup above). Errors are agreed on, so one rank's bad file stops
  //    every rank with that rank's message instead of the others' broken connections.
  Setup setup;
  RETURN_IF_ERROR(AgreeOnStatus(job, BuildSetup(options, job, setup), "setting up"));

  for (const std::string& note : setup.notes) report.progress.Print(note);

  // 2. Where to start: step 0, or the latest good checkpoint (also after an elastic restart).
  int64_t steps_per_epoch = OptimizerStepsPerEpoch(options, *setup.loader);
  if (options.join) {  // uneven shards: an epoch lasts as long as the longest one (the others shadow), and the
    Tensor most = Tensor::FromVector<int64_t>({steps_per_epoch}, {1}, job.device);  // schedule follows it
    RETURN_IF_ERROR(job.dp().AllReduce(most, dist::ReduceOp::kMax)->Wait());
    steps_per_epoch = most.ToVector<int64_t>()[0];
    setup.schedule = MakeSchedule(options, steps_per_epoch);
  }
  setup.steps_per_epoch = steps_per_epoch;
  TrainingProgress at;
  if (options.resume) {
    ASSIGN_OR_RETURN(at,
                     ResumeOnEveryRank(job, options, steps_per_epoch, *setup.model, *setup.optimizer, report.progress));
  }
  at.steps_per_epoch = steps_per_epoch;

  // --tp: the model is split over this rank's row of the mesh; DDP then sees the shards (dist/parallel/tensor).
  if (job.tensor && !options.pipeline()) RETURN_IF_ERROR(SplitModel(options, job, setup));
  // --pp (or --microbatches): this rank's stages of the model, over its pipeline (dist/parallel/pipeline).
  if (options.pipeline()) RETURN_IF_ERROR(SplitIntoStages(options, job, setup));

  // 3. DDP: from here on, every backward averages the gradients over the ranks.
  dist::DdpOptions ddp_options;  // PyTorch's defaults: 25 MiB buckets, 1 MiB first bucket, grads as bucket views
  ddp_options.bucket_cap_bytes = std::max<int64_t>(1, static_cast<int64_t>(options.bucket_cap_mb * dist::kMiB));
  ddp_options.first_bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(options.first_bucket_mb * dist::kMiB));
  ddp_options.find_unused_parameters = options.find_unused_parameters;
  ddp_options.bucket_order = at.bucket_order;  // resumed: the buckets the uninterrupted run has (docs/exactness.md)
  if (options.comm_hook == "bf16") {
    ddp_options.comm_hook = dist::Bf16CompressHook();
  } else if (options.zero == 1) {
    ddp_options.comm_hook = dist::zero::ReduceScatterHook(job.dp());  // ZeRO-1: buckets padded, reduce-scattered
  } else if (options.zero == 2) {  // ZeRO-2: buckets staged, reduce-scattered, only this rank's block kept
    setup.gradient_shards = dist::zero::GradientShards::Create(job.dp());
    ddp_options.comm_hook = setup.gradient_shards->Hook();
    ddp_options.gradient_as_bucket_view = false;
  } else if (options.ddp == "full" && !job.tensor && !setup.pipeline && std::string(job.pg->backend_name()) == "nccl") {
    // On GPUs: the copy-engine hook, which sends the large buckets of two GPUs of one machine to their copy
    // engines and every other bucket to NCCL's all_reduce (a collective setup; the bucket table says which).
    ASSIGN_OR_RETURN(setup.copy_engines, dist::CopyEngineHook::Create(*job.pg));
    ddp_options.comm_hook = setup.copy_engines->AsCommHook();
  }
  if (options.join) {  // uneven inputs: each bucket averaged over the ranks that train this step
    ASSIGN_OR_RETURN(setup.join, dist::join::Join::Create(job.data));
    ddp_options.comm_hook = setup.join->Hook(ddp_options.comm_hook);
    setup.placeholder = Variable(Tensor::Zeros({1, setup.datasets.train->input_size()}, DType::kFloat32, job.device));
  }
  if (!options.trace.empty()) setup.tracer = std::make_unique<dist::Tracer>(job.pg->rank(), job.device);
  // --tp --trace: each layer's compute and its all_reduces (f, g); the picture then shows those, not DDP's buckets.
  if (setup.tp) setup.tp->set_tracer(setup.tracer.get());
  if (setup.pipeline) setup.pipeline->runtime().set_tracer(setup.tracer.get());  // each F and B as a span
  if (options.zero == 3) {
    RETURN_IF_ERROR(ShardModel(options, job, setup));  // ZeRO-3 replaces DDP: every layer sharded
  } else if (setup.pipeline) {
    // --pp: no DDP; the pipeline averages its stages' gradients over job.data after each step's last backward.
  } else if (options.ddp == "full") {
    // --trace: each bucket's collective recorded by wrapping the hook (forward: DdpForward records it).
    if (setup.tracer && !setup.tp) ddp_options.comm_hook = dist::TracedCommHook(ddp_options.comm_hook, setup.tracer.get());
    ASSIGN_OR_RETURN(setup.ddp, dist::DistributedDataParallel::Create(TrainedModel(setup), job.data, ddp_options));
  } else {
    ASSIGN_OR_RETURN(setup.rung, dist::ladder::CreateDataParallel(options.ddp, *setup.model, job.pg, ddp_options,
                                                                  setup.tracer.get()));
  }
  if ((options.zero == 1 || options.zero == 2) && !setup.pipeline) {
    RETURN_IF_ERROR(ShardOptimizer(options, setup));  // attached to ddp (--pp: SplitIntoStages sharded each stage)
  }
  if (options.optimizer_in_backward && options.zero == 0) RETURN_IF_ERROR(StepInsideBackward(options, setup));

  ASSIGN_OR_RETURN(report.metrics, OpenMetrics(options, job, at));
  if (lead) PrintHeader(options, job, setup, report.progress);
  // Each bucket: bytes, parameters, and the path its all_reduce takes (NCCL, Gloo or the copy engines);
  // a lower rung of the ladder says how it communicates instead.
  if (lead) report.progress.Print(std::string(absl::StripTrailingAsciiWhitespace(DescribeDdp(setup))));
  if (options.cuda_graph) SetUpCudaGraph(options, job, at, setup, report);  // the step as one CUDA graph

  // 4. The loop: epochs of steps, the loss logged every --log_every steps (and checked: a NaN stops
  //    the run); after each epoch, evaluate and checkpoint, and every --checkpoint_every steps too.
  //    --max_steps may stop it mid-epoch, and so may a SIGTERM or SIGUSR1 (then: checkpoint, no
  //    evaluation, exit 75). A step trains on --grad_accum_steps batches.
  dist::zero::StartPeak(job.device);  // the memory table's peak: the steps', not the setup's
  LossWindow window(job.device, std::min(options.log_every, steps_per_epoch),
                    /*check_finite=*/!options.allow_nonfinite);
  bool stop = options.max_steps > 0 && at.global_step >= options.max_steps;
  bool preempted = false;
  EvalMetrics last_eval;
  bool memory_reported = false;
  for (int64_t epoch = at.epoch; epoch < options.epochs && !stop; ++epoch) {
    StartEpoch(options, job, epoch, setup, at, report);
    const auto loop_start = std::chrono::steady_clock::now();
    const int64_t steps_before = at.global_step;
    for (;;) {
      // --trace: start each step together, so that a rank that fell behind on shared CPU cores does not draw
      // as exposed communication in the other's picture. One tiny collective per traced step.
      if (setup.tracer) RETURN_IF_ERROR(job.pg->Barrier()->Wait());
      ASSIGN_OR_RETURN(const std::optional<Tensor> loss, StepOnNextBatch(options, setup, at.global_step, report));
      if (!loss) break;  // the end of the epoch
      if (loss->defined()) window.Add(*loss, at.global_step);  // undefined: --join's shadow step
      if (!memory_reported && (options.zero > 0 || setup.pipeline)) {  // after the first step, once. Collective.
        memory_reported = true;
        if (lead && setup.zero && !setup.pipeline) {
          report.progress.Print(absl::StrCat("ZeRO-", options.zero, " memory per rank: ", setup.zero->Memory().ToString()));
        }
        ASSIGN_OR_RETURN(const std::string table, MemoryTable(options, job, setup));
        if (lead && !table.empty()) report.progress.Print(std::string(absl::StripTrailingAsciiWhitespace(table)));
      }
      ++at.global_step;
      ++at.batch_in_epoch;
      // Told to stop? Every rank learns it after the same step (preemption.h). Collective.
      if (preemption != nullptr) {
        ASSIGN_OR_RETURN(preempted, preemption->StopAfterThisStep(*job.pg));
      }
      stop = preempted || (options.max_steps > 0 && at.global_step >= options.max_steps);
      const bool epoch_end = at.batch_in_epoch == steps_per_epoch;
      const bool checkpoint =
          options.checkpoint_every > 0 && at.global_step % options.checkpoint_every == 0 && !epoch_end && !stop;
      if (at.batch_in_epoch % options.log_every == 0 || epoch_end || stop || checkpoint) {
        RETURN_IF_ERROR(LogLoss(job, window, setup.schedule->LrAt(at.global_step - 1), at, report));
      }
      if (checkpoint) RETURN_IF_ERROR(CheckpointOnEveryRank(options, job, setup, at, report));  // mid-epoch
      if (lead) report.progress.Update(at.batch_in_epoch, std::nan(""));
      if (stop) break;
    }
    RETURN_IF_ERROR(setup.loader->status());
    report.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
    report.train_steps += at.global_step - steps_before;
    if (lead) report.progress.EndEpoch();
    if (setup.join) RETURN_IF_ERROR(ReportJoin(job, setup, report));
    const bool epoch_done = at.batch_in_epoch == steps_per_epoch;
    if (epoch_done) {
      at.epoch = epoch + 1;  // checkpoints record where to continue: the next epoch's first batch
      at.batch_in_epoch = 0;
    }
    if (!preempted) {  // preempted: no time to evaluate
      ASSIGN_OR_RETURN(last_eval, EvaluateEpoch(options, job, setup, at, epoch, epoch_done, report));
    }
    RETURN_IF_ERROR(CheckpointOnEveryRank(options, job, setup, at, report));  // preempted: before the grace ends
  }
  if (preempted) {  // the checkpoint above is where --resume continues; every rank leaves together
    if (lead) {
      const double since = preemption->SecondsSinceSignal();
      report.progress.Print(absl::StrFormat(
          "preempted: %s reached the job, every rank stopped after step %d%s; exiting with %d, not restarted: "
          "run again with --resume to continue from this checkpoint",
          preemption->SignalName(), at.global_step,
          since >= 0 ? absl::StrFormat(" (%.1f s after it reached rank 0)", since) : "",
          kPreemptedExitCode));
    }
    return job.pg->Barrier()->Wait();
  }
  return Finish(options, job, setup, at, last_eval, report);
}

// A worker's life: join the job (who am I, who are the others, how do we talk), train, leave. An error
// is printed while the process group still exists, so that this rank's message comes out before the
// other ranks notice the closed connections and report theirs, and recorded in the launcher's error
// file, so that the launcher can tell the rank that failed first from those that stopped because of it.
int RunWorker(TrainOptions options) {
  if (options.min_replicas > 0 && IsInPlaceReplacement()) return RunInPlaceReplacement(options);  // a rejoin
  dist::InitOptions init;
  init.backend = dist::ParseBackend(options.backend).value();  // checked by ParseTrainOptions
  init.timeout = options.timeout;  // --timeout: every wait of this rank, from the store to each collective
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::InitProcessGroup(init);
  if (!pg.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(pg.status().message()).c_str());
    dist::RecordWorkerFailure(-1, pg.status());
    return 1;
  }
  // A collective failure that ends the process where no Status reaches us (exit_on_failure.h) still
  // writes this rank's error file, so that the launcher's blame sees a timeout or a dead peer.
  dist::SetLastWordsBeforeCollectiveExit([rank = (*pg)->rank()](const absl::Status& status) {
    dist::RecordWorkerFailure(rank, status);
  });
  dist::AttachFlightRecorder(**pg);    // a failed collective dumps; the launcher's verdict names the rank
  dist::AttachCollectiveFaults(**pg);  // TINYDDP_FAULT=...,point=collective, for the failure tests
  dist::AttachDebugCheck(**pg);        // TINYDDP_DISTRIBUTED_DEBUG=DETAIL: ranks compare each call first
  // An elastic restart (launch/spawn --max_restarts) resumes from the last good checkpoint by itself.
  if (const int restart = dist::ReadWorkerEnv().value_or(dist::WorkerEnv{}).restart_count; restart > 0) {
    if ((*pg)->rank() == 0) {
      std::printf("elastic restart %d (%s=%d): %s\n", restart, dist::kRestartCountEnv, restart,
                  options.checkpoint_dir.empty() ? "no --checkpoint_dir, so training starts over from step 0"
                                           : "resuming from the last good checkpoint in --checkpoint_dir");
    }
    options.resume = !options.checkpoint_dir.empty();
  }
  Job job{*pg, Device::CPU()};
  if (std::string((*pg)->backend_name()) == "nccl") {
    // InitProcessGroup bound this process to cuda:LOCAL_RANK. Compute gets a stream of its own (not
    // the legacy default stream, which would serialise with every other stream of the device).
    job.device = Device::CUDA(cuda::CurrentDevice());
    cuda::Stream::SetCurrent(cuda::Stream::Create(job.device.index));
  }
  if (options.min_replicas > 0) {  // the in-place loop owns the group from here: a loss replaces it
    pg->reset();
    return RunInPlaceWorker(options, std::move(job));
  }
  // --tp: the world becomes a mesh of data-parallel x tensor-parallel groups (collective; train_setup.h).
  absl::StatusOr<std::string> mesh = JoinMesh(options, job);
  if (!mesh.ok()) {
    std::fprintf(stderr, "ddp_mlp: rank %d: %s\n", job.pg->rank(), std::string(mesh.status().message()).c_str());
    dist::RecordWorkerFailure(job.pg->rank(), mesh.status());
    return 2;
  }
  if (job.pg->rank() == 0 && !mesh->empty()) std::printf("%s\n", mesh->c_str());
  // With a checkpoint folder, a SIGTERM or SIGUSR1 (a preemption, a time limit, a pod's deletion) ends
  // the run after one more checkpoint instead of losing everything since the last one.
  std::unique_ptr<Preemption> preemption;
  if (options.preemption && !options.checkpoint_dir.empty()) preemption = std::make_unique<Preemption>(job.device);
  absl::Status status = Train(options, job, preemption.get());
  if (!status.ok()) {
    std::fprintf(stderr, "ddp_mlp: rank %d: %s\n", job.pg->rank(), std::string(status.message()).c_str());
    std::fflush(stderr);
    dist::RecordWorkerFailure(job.pg->rank(), status);
    return IsPermanent(status) ? kPermanentFailureExitCode : 1;  // 73: a restart would fail the same way
  }
  return preemption != nullptr && preemption->stopped() ? kPreemptedExitCode : 0;  // 75: run it again
}

// Workers to start when nobody launched us: --nproc, else one per GPU (NCCL) or 2 CPU ranks (Gloo).
dist::ElasticSpawnOptions SpawnOptionsFor(const TrainOptions& options) {
  dist::ElasticSpawnOptions spawn;
  spawn.spawn.nproc = static_cast<int>(options.nproc);
  if (spawn.spawn.nproc == 0 && options.backend == "gloo") {
    spawn.spawn.nproc = spawn.spawn.cpu_ranks;  // Gloo on a GPU machine: CPU ranks
  }
  spawn.max_restarts = static_cast<int>(options.max_restarts);
  spawn.one_gpu_each = options.backend == "nccl";
  spawn.ignore_worker_limits = options.ignore_worker_limits;
  // After a failed run: the rank that failed first, then the flight recorder's verdict.
  spawn.job_observers = {std::make_shared<dist::Blame>("spawn"), dist::JobRecords::ForThisJob()};
  // --min_replicas: one worker's death does not stop the others (last: its verdict is the job's).
  // With --max_restarts, a lost replica is replaced (it rejoins in place) rather than the world restarted.
  if (options.min_replicas > 0) {
    spawn.job_observers.push_back(
        std::make_shared<dist::in_place::KeepGoingAfterLoss>(static_cast<int>(options.max_restarts)));
  }
  return spawn;
}

}  // namespace
}  // namespace tinyddp::examples

int main(int argc, char** argv) {
  using namespace tinyddp::examples;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  absl::StatusOr<TrainOptions> options =
      ParseTrainOptions(std::vector<std::string>(argv + 1, argv + argc), wd != nullptr ? wd : "");
  if (!options.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\nddp_mlp: --help lists the flags\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(TrainUsage().c_str(), stdout);
    return 0;
  }
  // Started by srun, mpirun, mpiexec or as a Kubeflow pod: their variables become env://, which the rest reads.
  if (absl::StatusOr<std::string> engine = tinyddp::dist::UseClusterEngine(); !engine.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(engine.status().message()).c_str());
    return 2;
  }
  if (absl::Status fault = tinyddp::CheckFaultInjectionEnvironment(); !fault.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(fault.message()).c_str());
    return 2;
  }
  // Before starting workers, a missing dataset is reported once, here, rather than by every rank.
  if (!tinyddp::dist::IsWorker() && options->dataset == "fashion_mnist") {
    absl::Status found = tinyddp::data::LoadFashionMnist(options->data_dir, "test").status();
    if (!found.ok()) {
      std::fprintf(stderr, "ddp_mlp: %s Here: --data_dir=DIR.\n", std::string(found.message()).c_str());
      return 1;
    }
  }
  // --backend=nccl needs a GPU: say so once, before starting workers that would all fail.
  if (!tinyddp::dist::IsWorker() && options->backend == "nccl" &&
      (!tinyddp::cuda::BuiltWithCuda() || tinyddp::cuda::DeviceCount() == 0)) {
    std::fprintf(stderr, "ddp_mlp: --backend=nccl: %s; use --backend=gloo (CPU ranks)\n",
                 tinyddp::cuda::BuiltWithCuda() ? "no GPU is visible" : "this build has no CUDA/NCCL");
    return 2;
  }
  if (absl::Status in_place = tinyddp::dist::in_place::CheckMinReplicas(
          {.min_replicas = options->min_replicas, .replicas = options->nproc, .backend = options->backend,
           .tp = options->tp, .pp = options->pp, .zero = options->zero, .microbatches = options->microbatches, .join = options->join, .cuda_graph = options->cuda_graph,
           .grad_accum_steps = options->grad_accum_steps, .ddp = options->ddp});
      !in_place.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(in_place.message()).c_str());
    return 2;
  }
  // Before anything large is allocated: do this host's ranks fit in its memory? Refused with the figures.
  if (absl::Status fits = CheckMemoryFits(*options); !fits.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(fits.message()).c_str());
    return 2;
  }
  // Not a worker yet? Become a small launcher that runs this same binary once per rank, and exit
  // with the job's status. In a worker (RANK set, by a launcher or by UseClusterEngine above) this returns.
  absl::Status spawned = tinyddp::dist::SpawnElasticWorkersIfNeeded(argc, argv, SpawnOptionsFor(*options));
  if (!spawned.ok()) {
    std::fprintf(stderr, "ddp_mlp: could not start workers: %s\n", std::string(spawned.message()).c_str());
    return absl::IsResourceExhausted(spawned) || absl::IsInvalidArgument(spawned) ? 2 : 1;
  }
  return RunWorker(*options);
}
