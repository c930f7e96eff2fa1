// ddp_mlp: trains an MLP on Fashion-MNIST with DistributedDataParallel, end to end. The program a
// newcomer runs first:
//
//   ./bazelw run //examples:ddp_mlp                 # one rank per GPU over NCCL, or 2 CPU ranks over Gloo
//   ./bazelw run //examples:ddp_mlp -- --help       # the flags (docs/ddp_mlp.md explains the output)
//
// Read it top to bottom: it is the spine of a data-parallel training script, the C++ twin of a
// torch.distributed + DDP script. Every rank runs this same program on its own shard of the data:
//
//   main       flags -> start workers if nobody else did (SpawnWorkersIfNeeded) -> RunWorker
//   RunWorker  join the job (InitProcessGroup: NCCL on GPUs, Gloo on CPUs) -> Train
//   Train      data -> model -> (resume) -> DDP -> for each epoch:   (what comes before DDP: train_setup.h)
//                for each batch (or --grad_accum_steps of them): TrainStep (lr(step), zero grads, forward,
//                loss, backward: DDP all_reduces the gradient buckets while it runs, optimizer step), log
//                then: evaluate on every rank's shard, combine with all_reduce, log, checkpoint
// --ddp picks the DDP: the production one (full, the default) or a lower rung of the ladder that builds it
// up (naive, flat, bucketed: dist/ddp/ladder, docs/ddp_ladder.md), all behind the same three calls.
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
#include "dist/ddp/comm_hooks.h"                   // Bf16CompressHook (--comm_hook=bf16)
#include "dist/ddp/ddp.h"                          // DdpOptions
#include "dist/ddp/graphed_step.h"                 // GraphedStep (--cuda_graph): the step as one CUDA graph
#include "dist/ddp/ladder/full_ddp.h"              // FullDdp::ddp(): the DistributedDataParallel of --ddp=full
#include "dist/ddp/ladder/ladder.h"                // CreateDataParallel: --ddp=naive|flat|bucketed|full
#include "dist/ddp/timeline/timeline_svg.h"        // WriteTimelineSvg: --trace's picture
#include "dist/ddp/trace.h"                        // Tracer (--trace)
#include "dist/ddp/zero/zero_optimizer.h"          // ZeRO-1 (--zero=1): memory, consolidated state
#include "dist/init.h"                             // InitProcessGroup: env -> store -> NCCL or Gloo group
#include "dist/launch/env.h"                       // IsWorker, RestartCount
#include "dist/launch/error_file.h"                // RecordWorkerFailure: why, for the launcher
#include "dist/launch/spawn.h"                     // SpawnWorkersIfNeeded
#include "examples/internal/evaluate.h"            // EvaluateShard, AllReduceEvalSums
#include "examples/internal/loss_window.h"         // LossWindow: step losses on the device, non-finite check
#include "examples/internal/metrics_writer.h"      // MetricsWriter (--metrics_out): JSON lines + SVG plot
#include "examples/internal/progress.h"            // Progress: the live bar, or plain lines
#include "examples/internal/train_checkpoint.h"    // SaveTrainingCheckpoint
#include "examples/internal/train_options.h"       // TrainOptions, ParseTrainOptions: the flags
#include "examples/internal/train_setup.h"         // Job, Setup, BuildSetup, ResumeOnEveryRank: before training
#include "nn/device_lr.h"                          // DeviceLr (--cuda_graph): the schedule on the device
#include "tensor/cpu_isa.h"                        // CpuIsaSummary: which CPU kernels run
#include "tensor/cuda_device.h"                    // CurrentDevice
#include "tensor/ops.h"                            // AddInto (loss accumulation on the device)
#include "tensor/stream.h"                         // Stream: a compute stream of our own on the GPU

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

void PrintHeader(const TrainOptions& o, const Job& job, const Setup& s, Progress& progress) {
  progress.Print(
      absl::StrFormat("ddp_mlp: MLP %s (%d parameters), %d rank(s) over %s on %s, %s: %d train / %d test examples",
                      absl::StrJoin(s.dims, "-"), s.model->NumParameters(), job.pg->size(), job.pg->backend_name(),
                      job.device.ToString(), o.dataset, s.datasets.train->Size(), s.datasets.test->Size()));
  const std::string accumulation =
      o.grad_accum_steps == 1
          ? ""
          : absl::StrFormat(" x %d accumulated (%d examples per optimizer step)", o.grad_accum_steps,
                            o.batch_size * job.pg->size() * o.grad_accum_steps);
  progress.Print(absl::StrFormat("  %d epochs x %d steps, batch %d per rank (%d global)%s, %s, lr %s%s, --ddp=%s%s",
                                 o.epochs, OptimizerStepsPerEpoch(o, *s.loader), o.batch_size,
                                 o.batch_size * job.pg->size(), accumulation, o.optimizer, s.schedule->ToString(),
                                 o.precision == "bf16" ? ", bf16 mixed precision" : "", o.ddp,
                                 o.zero == 1 ? ", optimizer sharded by ZeRO-1" : ""));
  if (job.device.is_cpu()) progress.Print("  " + CpuIsaSummary());  // which CPU kernels run (tensor/cpu_isa.h)
}

// Collective: rank 0 opens --metrics_out (appending when a resumed run continues); every rank learns
// whether that worked.
absl::StatusOr<std::unique_ptr<MetricsWriter>> OpenMetrics(const TrainOptions& o, const Job& job,
                                                           const TrainingProgress& at) {
  std::unique_ptr<MetricsWriter> metrics;
  absl::Status opened;
  if (job.pg->rank() == 0 && !o.metrics_out.empty()) {
    auto writer = MetricsWriter::Open(o.metrics_out, /*append=*/o.resume && at.global_step > 0);
    if (writer.ok()) metrics = *std::move(writer);
    opened = writer.status();
  }
  RETURN_IF_ERROR(AgreeOnStatus(job, opened, "opening --metrics_out"));
  return metrics;
}

// Collective (every rank logs at the same steps): the loss since the last log, averaged over steps and
// ranks, added to the epoch's tally; rank 0 prints it and records it in --metrics_out.
absl::Status LogLoss(const Job& job, LossWindow& window, double lr, TrainingProgress& at, Report& r) {
  const int64_t steps = window.steps();
  ASSIGN_OR_RETURN(const double sum, window.Flush(*job.pg));  // stops a run whose loss is NaN or Inf
  at.epoch_loss_sum += sum;
  at.epoch_loss_count += static_cast<double>(steps);
  if (!r.lead) return absl::OkStatus();
  const double mean = sum / static_cast<double>(steps);
  r.progress.LogStep(at.batch_in_epoch, mean, lr);
  if (r.metrics) {
    RETURN_IF_ERROR(r.metrics->WriteStep({at.global_step, at.epoch, mean, lr, r.progress.SamplesPerSecond()}));
  }
  return absl::OkStatus();
}

// Collective, after an epoch: every rank evaluates its unpadded shard of the test set, one all_reduce
// combines the sums, and rank 0 prints and records the epoch's line.
absl::StatusOr<EvalMetrics> EvaluateEpoch(const TrainOptions& o, const Job& job, const Setup& s,
                                          const TrainingProgress& at, int64_t epoch, bool epoch_done, Report& r) {
  ASSIGN_OR_RETURN(const EvalSums local, EvaluateShard(*s.model, *s.datasets.test, s.eval_indices, job.device));
  ASSIGN_OR_RETURN(const EvalMetrics eval, AllReduceEvalSums(*job.pg, job.device, local));
  const double train_loss = at.epoch_loss_count > 0 ? at.epoch_loss_sum / at.epoch_loss_count : std::nan("");
  if (r.lead) {
    r.progress.Print(
        absl::StrFormat("epoch %d/%d%s: train loss %.4f | test loss %.4f, accuracy %.2f%% (%d examples) | %.1fs",
                        epoch + 1, o.epochs, epoch_done ? "" : " (stopped at --max_steps)", train_loss, eval.loss,
                        100 * eval.accuracy, eval.count, r.Seconds()));
    if (r.metrics) {
      RETURN_IF_ERROR(
          r.metrics->WriteEpoch({epoch, at.global_step, train_loss, eval.loss, eval.accuracy, r.Seconds()}));
    }
  }
  return eval;
}

// Collective: rank 0 writes the checkpoint (every rank holds the same weights and optimizer state) and
// every rank learns whether that worked.
absl::Status CheckpointOnEveryRank(const TrainOptions& o, const Job& job, Setup& s, const TrainingProgress& at,
                                   Report& r) {
  if (o.checkpoint_dir.empty()) return absl::OkStatus();
  // ZeRO-1: every rank gathers the shards into the unsharded optimizer (collective), which is saved as
  // plain DDP's is, so the checkpoint resumes at any number of ranks, with or without ZeRO.
  dist::zero::ZeroRedundancyOptimizer* zero = s.zero();
  if (zero != nullptr) {
    ASSIGN_OR_RETURN(const nn::TensorMap full, zero->ConsolidatedStateTensors());
    RETURN_IF_ERROR(s.optimizer->LoadStateTensors(full));
  }
  absl::Status saved_ok;
  if (r.lead) {
    absl::StatusOr<std::string> saved = SaveTrainingCheckpoint(
        o.checkpoint_dir, *s.model, *s.optimizer, at, o.TrajectorySettings(job.pg->size()), o.keep_checkpoints);
    if (saved.ok()) r.progress.Print(absl::StrCat("  checkpoint: ", *saved));
    saved_ok = saved.status();
  }
  if (zero != nullptr) RETURN_IF_ERROR(s.optimizer->LoadStateTensors({}));  // the shards hold it
  return AgreeOnStatus(job, saved_ok, "writing the checkpoint");
}

// Outputs that need the whole run and the last line, then every rank leaves together (rank 0 may host
// the job's store, which the others still need until then).
absl::Status Finish(const TrainOptions& o, const Job& job, const Setup& s, const TrainingProgress& at,
                    const EvalMetrics& last_eval, Report& r) {
  if (r.metrics) {
    ASSIGN_OR_RETURN(const std::string plot, r.metrics->Finish());
    r.progress.Print(absl::StrCat("metrics: ", o.metrics_out, ", plot: ", plot));
  }
  if (s.tracer) {
    RETURN_IF_ERROR(s.tracer->WriteChromeTrace(job.pg.get(), o.trace));  // collective: rank 0 writes
    if (r.lead) {
      // And its picture beside it (FILE.svg): the last two steps, each all_reduce labelled with its bytes.
      dist::TraceSvgOptions svg;
      svg.bucket_bytes = s.ddp->AllReduceBytes();
      svg.title = absl::StrCat("DDP step timeline, --ddp=", o.ddp);
      const absl::StatusOr<std::string> drawn = dist::WriteTimelineSvg(o.trace, svg);
      r.progress.Print(absl::StrCat("trace: ", o.trace, " (open in https://ui.perfetto.dev), timeline: ",
                                    drawn.ok() ? *drawn : std::string(drawn.status().message())));
    }
  }
  if (r.lead && s.graphed) {  // --cuda_graph: whether the graph path was taken, and if not, why
    r.progress.Print(absl::StrFormat("cuda graph: %d step(s) replayed, %d run eagerly by the graphed step; at the "
                                     "end: %s", s.graphed->replays(), s.graphed->eager_steps(),
                                     s.graphed->ModeName()));
  }
  if (r.lead && last_eval.count == 0) {
    r.progress.Print(absl::StrFormat("nothing to train: the run is already at step %d (--epochs=%d, --max_steps=%d)",
                                     at.global_step, o.epochs, o.max_steps));
  } else if (r.lead) {
    r.progress.Print(absl::StrFormat("done: %d steps, test accuracy %.2f%%, %.1fs (%.2f ms per training step)",
                                     at.global_step, 100 * last_eval.accuracy, r.Seconds(),
                                     1000 * r.train_seconds / std::max<int64_t>(1, r.train_steps)));
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

// One optimizer step, the five lines of every PyTorch training loop. DDP works inside three of them: its
// Forward starts the iteration, Backward all_reduces the gradient buckets while it runs (bucketed, full),
// and FinishBackward completes the average (naive, flat: all of the communication happens there).
// With --grad_accum_steps, `batches` holds several micro-batches: all but the last run under no_sync
// (their backwards only add into .grad), and each one's mean loss is weighted by its share of the step's
// examples (the seed of Backward), so .grad ends as the mean over all of them - k micro-batches of b train
// like one batch of k*b, up to the order in which float sums are added.
// Returns the step's loss (mean over its examples), left on the device (reading it would wait for the GPU).
// `poison`: a failure test's NaN batch (TINYDDP_FAULT, injected by StepOnNextBatch).
absl::StatusOr<Tensor> TrainStep(Setup& s, const std::vector<data::Batch>& batches, int64_t step, bool poison = false) {
  if (s.device_lr) {
    s.device_lr->Advance();  // --cuda_graph: the schedule moves on the device, also inside the graph
  } else {
    s.optimizer->set_lr(s.schedule->LrAt(step));
  }
  if (s.zero() != nullptr) s.full->SetFusedOptimizerLr(s.optimizer->lr());
  s.optimizer->ZeroGrad();
  int64_t examples = 0;
  for (const data::Batch& b : batches) examples += b.size();
  Tensor step_loss;
  for (size_t m = 0; m < batches.size(); ++m) {
    const bool last = m + 1 == batches.size();
    const double share = static_cast<double>(batches[m].size()) / static_cast<double>(examples);  // 1: no accumulation
    const Tensor& inputs = batches[m].inputs;
    const Variable logits = s.ddp->Forward(Variable(poison ? ops::Scale(inputs, std::nan("")) : inputs), /*sync=*/last);
    const Variable loss = s.loss_fn(logits, batches[m].labels);
    {
      dist::Tracer::Span span = dist::Tracer::MaybeScope(s.tracer.get(), "backward", step);
      autograd::Backward(loss, share == 1 ? Tensor() : Tensor::Full(loss.shape(), share, loss.dtype(), loss.device()));
    }
    // A bucket whose all_reduce failed (a peer died, or froze past --timeout) left gradients that are not
    // averages: stop with its error rather than step on them (PyTorch raises from backward()).
    RETURN_IF_ERROR(s.ddp->FinishBackward());
    if (batches.size() == 1) {
      step_loss = loss.data();
    } else {
      if (!step_loss.defined()) step_loss = Tensor::Zeros(loss.shape(), loss.dtype(), loss.device());
      ops::AddInto(step_loss, loss.data(), share);
    }
  }
  if (s.zero() == nullptr) {  // ZeRO-1 stepped each rank's shard inside Backward
    dist::Tracer::Span span = dist::Tracer::MaybeScope(s.tracer.get(), "optimizer", step);
    s.optimizer->Step();
  }
  return step_loss;
}

// --cuda_graph: the whole step recorded into one CUDA graph after a few eager steps, then replayed
// (dist/ddp/graphed_step.h). Two things change for the step, not its results: the batch is copied into
// fixed buffers (DataLoader::NextInto), and the learning rate comes from the device (nn/device_lr.h), so
// that each replay follows the schedule. Where capture is impossible (CPU ranks, --trace, a rung below
// --ddp=full, --grad_accum_steps, --zero=1) the reason is printed once and the plain loop runs.
void SetUpCudaGraph(const TrainOptions& o, const Job& job, const TrainingProgress& at, Setup& s, Report& r) {
  dist::GraphedStepOptions options;
  options.log = [&r](const std::string& line) {
    if (r.lead) r.progress.Print(line);
  };
  if (o.ddp != "full") {
    options.eager_reason = absl::StrCat("--ddp=", o.ddp, " waits for its all_reduces on the host; --ddp=full records");
  } else if (o.grad_accum_steps != 1) {
    options.eager_reason = "--grad_accum_steps runs several micro-batches per step; a graph replays one";
  } else if (o.zero != 0) {
    options.eager_reason = "ZeRO-1 under a CUDA graph is not implemented (its sharded optimizers are not recorded)";
  }
  auto graphed = std::make_unique<dist::GraphedStep>(
      job.device, [&s] { return TrainStep(s, {data::Batch{s.static_inputs, s.static_labels}}, /*step=*/0); },
      s.full, std::vector<const nn::Optimizer*>{s.optimizer.get()}, std::move(options));
  if (!graphed->eager_reason().empty()) return;  // said why; the eager loop it is
  s.device_lr = std::make_unique<nn::DeviceLr>(*s.schedule, o.epochs * s.loader->num_batches(), job.device);
  s.device_lr->SetStep(at.global_step);  // a resumed run continues the curve
  s.optimizer->UseDeviceLr(s.device_lr->lr());
  s.static_inputs = Tensor::Empty({o.batch_size, s.datasets.train->input_size()}, DType::kFloat32, job.device);
  s.static_labels = Tensor::Empty({o.batch_size}, DType::kInt64, job.device);
  s.graphed = std::move(graphed);
}

// One optimizer step on the next batch(es) of the epoch; nullopt at its end (or on a loader error: loader->status()).
// Eager: TrainStep on the loader's batch. --cuda_graph: the batch goes into the fixed buffers and the
// graphed step runs (eagerly while warming up, then replays); a smaller last batch runs eagerly on the
// buffers' first rows, since a graph replays fixed shapes, and so does a failure test's poisoned batch.
absl::StatusOr<std::optional<Tensor>> StepOnNextBatch(const TrainOptions& o, Setup& s, int64_t step, Report& r) {
  int64_t rows = 0;
  std::vector<data::Batch> batches;  // eager: --grad_accum_steps of them (fewer at the end of the epoch)
  if (s.graphed) {
    rows = s.loader->NextInto(s.static_inputs, s.static_labels);
    if (rows == 0) return std::optional<Tensor>();
  } else {
    batches = NextBatches(*s.loader, o.grad_accum_steps);
    if (batches.empty()) return std::optional<Tensor>();
  }
  // Failure tests make a rank hang, exit or die here (TINYDDP_FAULT); "nan" poisons this batch.
  const bool poison = MaybeInjectFault("step", step) == FaultAction::kNonFinite;
  if (!s.graphed) {
    ASSIGN_OR_RETURN(Tensor loss, TrainStep(s, batches, step, poison));
    return std::optional<Tensor>(loss);
  }
  if (rows < o.batch_size || poison) {
    if (r.lead && !s.said_partial_batch && !poison) {
      r.progress.Print(absl::StrFormat("cuda graph: the last batch of an epoch has %d rows, not %d: it runs eagerly "
                                       "(a graph replays fixed shapes)", rows, o.batch_size));
      s.said_partial_batch = true;
    }
    const data::Batch partial{s.static_inputs.Rows(0, rows), s.static_labels.Rows(0, rows)};
    ASSIGN_OR_RETURN(Tensor loss, TrainStep(s, {partial}, step, poison));
    return std::optional<Tensor>(loss);
  }
  ASSIGN_OR_RETURN(Tensor loss, s.graphed->Run());
  return std::optional<Tensor>(loss);
}

// Starts epoch `epoch` at its first step not trained yet (mid-epoch after a resume).
void StartEpoch(const TrainOptions& o, const Job& job, int64_t epoch, Setup& s, TrainingProgress& at, Report& r) {
  s.loader->Reset(epoch);  // the shuffle of this epoch, a function of (seed, epoch)
  const int64_t first_batch = epoch == at.epoch ? at.batch_in_epoch : 0;  // in optimizer steps
  for (int64_t skip = 0; skip < first_batch * o.grad_accum_steps; ++skip) {  // trained before the resume
    if (!s.loader->Next()) break;
  }
  if (first_batch == 0) at.epoch_loss_sum = at.epoch_loss_count = 0;     // a fresh epoch
  at.epoch = epoch;
  at.batch_in_epoch = first_batch;
  if (r.lead) {
    r.progress.BeginEpoch(epoch, o.epochs, at.steps_per_epoch, first_batch,
                          o.batch_size * job.pg->size() * o.grad_accum_steps);
  }
}

// A rank's whole run. Every rank runs the same collectives in the same order; only rank 0 reports.
absl::Status Train(const TrainOptions& o, const Job& job) {
  const bool lead = job.pg->rank() == 0;
  Report report{lead, Progress(lead && ::isatty(::fileno(stdout)), stdout)};

  // 1. Data, model, optimizer (BuildSetup above). Errors are agreed on, so one rank's bad file stops
  //    every rank with that rank's message instead of the others' broken connections.
  Setup s;
  RETURN_IF_ERROR(AgreeOnStatus(job, BuildSetup(o, job, s), "setting up"));

  for (const std::string& note : s.notes) report.progress.Print(note);

  // 2. Where to start: step 0, or the latest good checkpoint (also after an elastic restart).
  const int64_t steps_per_epoch = OptimizerStepsPerEpoch(o, *s.loader);
  TrainingProgress at;
  if (o.resume) {
    ASSIGN_OR_RETURN(at, ResumeOnEveryRank(job, o, steps_per_epoch, *s.model, *s.optimizer, report.progress));
  }
  at.steps_per_epoch = steps_per_epoch;

  // 3. DDP: from here on, every backward averages the gradients over the ranks.
  dist::DdpOptions ddp_options;  // PyTorch's defaults: 25 MiB buckets, 1 MiB first bucket, grads as bucket views
  ddp_options.bucket_cap_bytes = std::max<int64_t>(1, static_cast<int64_t>(o.bucket_cap_mb * dist::kMiB));
  ddp_options.first_bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(o.first_bucket_mb * dist::kMiB));
  ddp_options.find_unused_parameters = o.find_unused_parameters;
  if (o.comm_hook == "bf16") ddp_options.comm_hook = dist::Bf16CompressHook();
  if (!o.trace.empty()) {
    s.tracer = std::make_unique<dist::Tracer>(job.pg->rank(), job.device);
    ddp_options.tracer = s.tracer.get();  // DDP records forward and each bucket's all_reduce
  }
  ddp_options.zero_stage = static_cast<int>(o.zero);
  ASSIGN_OR_RETURN(s.ddp, dist::ladder::CreateDataParallel(o.ddp, *s.model, job.pg, ddp_options));
  if (o.ddp == "full") s.full = &static_cast<dist::ladder::FullDdp&>(*s.ddp).ddp();
  if (o.zero == 1) RETURN_IF_ERROR(ShardOptimizer(o, s));

  ASSIGN_OR_RETURN(report.metrics, OpenMetrics(o, job, at));
  if (lead) PrintHeader(o, job, s, report.progress);
  // Each bucket: bytes, parameters, and the path its all_reduce takes (NCCL, Gloo or the copy engines);
  // a lower rung of the ladder says how it communicates instead.
  if (lead) report.progress.Print(std::string(absl::StripTrailingAsciiWhitespace(s.ddp->Describe())));
  if (o.cuda_graph) SetUpCudaGraph(o, job, at, s, report);  // the step as one CUDA graph, where possible

  // 4. The loop: epochs of steps, the loss logged every --log_every steps (and checked: a NaN stops
  //    the run); after each epoch, evaluate and checkpoint, and every --checkpoint_every steps too.
  //    --max_steps may stop it mid-epoch. A step trains on --grad_accum_steps batches.
  LossWindow window(job.device, std::min(o.log_every, steps_per_epoch), /*check_finite=*/!o.allow_nonfinite);
  bool stop = o.max_steps > 0 && at.global_step >= o.max_steps;
  EvalMetrics last_eval;
  bool zero_reported = false;
  for (int64_t epoch = at.epoch; epoch < o.epochs && !stop; ++epoch) {
    StartEpoch(o, job, epoch, s, at, report);
    const auto loop_start = std::chrono::steady_clock::now();
    const int64_t steps_before = at.global_step;
    for (;;) {
      ASSIGN_OR_RETURN(const std::optional<Tensor> loss, StepOnNextBatch(o, s, at.global_step, report));
      if (!loss) break;  // the end of the epoch
      window.Add(*loss, at.global_step);
      if (lead && s.zero() != nullptr && !zero_reported) {  // after the first step: its state exists
        zero_reported = true;
        report.progress.Print(absl::StrCat("ZeRO-1 memory per rank: ", s.zero()->Memory().ToString()));
      }
      ++at.global_step;
      ++at.batch_in_epoch;
      stop = o.max_steps > 0 && at.global_step >= o.max_steps;
      const bool epoch_end = at.batch_in_epoch == steps_per_epoch;
      const bool checkpoint = o.checkpoint_every > 0 && at.global_step % o.checkpoint_every == 0 && !epoch_end && !stop;
      if (at.batch_in_epoch % o.log_every == 0 || epoch_end || stop || checkpoint) {
        RETURN_IF_ERROR(LogLoss(job, window, s.schedule->LrAt(at.global_step - 1), at, report));
      }
      if (checkpoint) RETURN_IF_ERROR(CheckpointOnEveryRank(o, job, s, at, report));  // mid-epoch
      if (lead) report.progress.Update(at.batch_in_epoch, std::nan(""));
      if (stop) break;
    }
    RETURN_IF_ERROR(s.loader->status());
    report.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
    report.train_steps += at.global_step - steps_before;
    if (lead) report.progress.EndEpoch();
    const bool epoch_done = at.batch_in_epoch == steps_per_epoch;
    if (epoch_done) {
      at.epoch = epoch + 1;  // checkpoints record where to continue: the next epoch's first batch
      at.batch_in_epoch = 0;
    }
    ASSIGN_OR_RETURN(last_eval, EvaluateEpoch(o, job, s, at, epoch, epoch_done, report));
    RETURN_IF_ERROR(CheckpointOnEveryRank(o, job, s, at, report));
  }
  return Finish(o, job, s, at, last_eval, report);
}

// A worker's life: join the job (who am I, who are the others, how do we talk), train, leave. An error
// is printed while the process group still exists, so that this rank's message comes out before the
// other ranks notice the closed connections and report theirs, and recorded in the launcher's error
// file, so that the launcher can tell the rank that failed first from those that stopped because of it.
int RunWorker(TrainOptions o) {
  dist::InitOptions init;
  init.backend = dist::ParseBackend(o.backend).value();  // checked by ParseTrainOptions
  init.timeout = o.timeout;  // --timeout: every wait of this rank, from the store to each collective
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::InitProcessGroup(init);
  if (!pg.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(pg.status().message()).c_str());
    dist::RecordWorkerFailure(-1, pg.status());
    return 1;
  }
  // An elastic restart (launch/spawn --max_restarts) resumes from the last good checkpoint by itself.
  if (const int restart = dist::RestartCount(); restart > 0) {
    if ((*pg)->rank() == 0) {
      std::printf("elastic restart %d (%s=%d): %s\n", restart, dist::kRestartCountEnv, restart,
                  o.checkpoint_dir.empty() ? "no --checkpoint_dir, so training starts over from step 0"
                                           : "resuming from the last good checkpoint in --checkpoint_dir");
    }
    o.resume = !o.checkpoint_dir.empty();
  }
  Job job{*pg, Device::CPU()};
  if (std::string((*pg)->backend_name()) == "nccl") {
    // InitProcessGroup bound this process to cuda:LOCAL_RANK. Compute gets a stream of its own (not
    // the legacy default stream, which would serialise with every other stream of the device).
    job.device = Device::CUDA(cuda::CurrentDevice());
    cuda::Stream::SetCurrent(cuda::Stream::Create(job.device.index));
  }
  absl::Status status = Train(o, job);
  if (!status.ok()) {
    std::fprintf(stderr, "ddp_mlp: rank %d: %s\n", job.pg->rank(), std::string(status.message()).c_str());
    std::fflush(stderr);
    dist::RecordWorkerFailure(job.pg->rank(), status);
    return 1;
  }
  return 0;
}

// Workers to start when nobody launched us: --nproc, else one per GPU (NCCL) or 2 CPU ranks (Gloo).
dist::SpawnOptions SpawnOptionsFor(const TrainOptions& o) {
  dist::SpawnOptions s;
  s.nproc = static_cast<int>(o.nproc);
  if (s.nproc == 0 && o.backend == "gloo") s.nproc = s.cpu_ranks;  // Gloo on a GPU machine: CPU ranks
  s.max_restarts = static_cast<int>(o.max_restarts);
  s.one_gpu_each = o.backend == "nccl";
  s.ignore_worker_limits = o.ignore_worker_limits;
  return s;
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
  if (absl::Status fault = tinyddp::CheckFaultInjectionEnvironment(); !fault.ok()) {
    std::fprintf(stderr, "ddp_mlp: %s\n", std::string(fault.message()).c_str());
    return 2;
  }
  // Before starting workers, a missing dataset is reported once, here, rather than by every rank.
  if (!tinyddp::dist::IsWorker() && options->dataset == "fashion_mnist") {
    absl::Status found = tinyddp::data::LoadFashionMnist(options->data_dir, "test").status();
    if (!found.ok()) {
      std::fprintf(stderr, "ddp_mlp: %s\n", std::string(found.message()).c_str());
      return 1;
    }
  }
  // --backend=nccl needs a GPU: say so once, before starting workers that would all fail.
  if (!tinyddp::dist::IsWorker() && options->backend == "nccl" &&
      (!tinyddp::dist::NcclAvailable() || tinyddp::cuda::DeviceCount() == 0)) {
    std::fprintf(stderr, "ddp_mlp: --backend=nccl: %s; use --backend=gloo (CPU ranks)\n",
                 tinyddp::dist::NcclAvailable() ? "no GPU is visible" : "this build has no CUDA/NCCL");
    return 2;
  }
  // Not a worker yet? Become a small launcher that runs this same binary once per rank, and exit
  // with the job's status. In a worker (RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK set) this returns.
  absl::Status spawned = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv, SpawnOptionsFor(*options));
  if (!spawned.ok()) {
    std::fprintf(stderr, "ddp_mlp: could not start workers: %s\n", std::string(spawned.message()).c_str());
    return absl::IsResourceExhausted(spawned) || absl::IsInvalidArgument(spawned) ? 2 : 1;
  }
  return RunWorker(*options);
}
