// TrainOptions: see train_options.h. The flags, each defaulting to its TrainOptions field, then the
// checks, then the copy into the struct.
#include "examples/internal/train_options.h"

#include <algorithm>
#include <cmath>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "base/status_macros.h"
#include "dist/parallel/pipeline/pipeline_flags.h"
#include "dist/worker/job_timeout.h"
#include "examples/internal/user_path.h"

namespace {
const tinyddp::examples::TrainOptions kDefaults;
}  // namespace

// Job shape.
ABSL_FLAG(int64_t, nproc, kDefaults.nproc, "ranks to start when not under a launcher; 0 = one per GPU, or 2 on CPU");
ABSL_FLAG(std::string, backend, kDefaults.backend,
          "collectives: nccl on GPUs, gloo on CPU; auto picks nccl when there is a GPU (auto|gloo|nccl)");
ABSL_FLAG(bool, ignore_worker_limits, kDefaults.ignore_worker_limits,
          "start --nproc (or TINYDDP_NPROC) ranks even if this machine's memory, process or file limits, or its "
          "GPU count for NCCL, cannot hold them");
// Failures.
ABSL_FLAG(std::string, timeout, "",
          "bound on every wait (store, rendezvous, each collective): seconds, or 30s, 2m; a rank that waits "
          "longer for the others fails; empty = $TINYDDP_TIMEOUT, else 300s");
ABSL_FLAG(int64_t, max_restarts, kDefaults.max_restarts,
          "when a rank fails, stop all and start them again, this many times; with --checkpoint_dir the "
          "restarted ranks resume from the last good checkpoint");
ABSL_FLAG(int64_t, min_replicas, kDefaults.min_replicas,
          "keep training when a rank dies or freezes, in place, while at least this many data-parallel replicas "
          "remain: the survivors agree on who goes on, rebuild their group and redo the step (docs/fault_tolerance.md; "
          "0 = off: the job stops, or restarts with --max_restarts)");
ABSL_FLAG(double, recovery_window, kDefaults.recovery_window,
          "with --min_replicas: seconds the survivors of a loss wait for each other before deciding who goes on");
ABSL_FLAG(bool, allow_nonfinite, kDefaults.allow_nonfinite,
          "train on when the loss becomes NaN or infinite (by default the run stops, naming the step and rank)");
// Model and optimisation.
ABSL_FLAG(std::string, hidden, absl::StrJoin(kDefaults.hidden, ","), "hidden layer widths of the MLP 784-...-10");
ABSL_FLAG(std::string, optimizer, kDefaults.optimizer, "sgd uses --momentum (sgd|adamw)");
ABSL_FLAG(std::string, precision, kDefaults.precision,
          "bf16: bfloat16 compute with float32 master weights, gradients, optimizer state and loss (fp32|bf16)");
ABSL_FLAG(std::string, lr_schedule, kDefaults.lr_schedule, "learning rate over the run (constant|step|cosine)");
ABSL_FLAG(double, lr, kDefaults.lr, "base learning rate");
ABSL_FLAG(double, momentum, kDefaults.momentum, "SGD momentum");
ABSL_FLAG(double, weight_decay, kDefaults.weight_decay, "L2 penalty (sgd) or decoupled weight decay (adamw)");
ABSL_FLAG(int64_t, warmup_steps, kDefaults.warmup_steps, "cosine: linear warmup over this many steps");
ABSL_FLAG(int64_t, lr_step_epochs, kDefaults.lr_step_epochs, "step: multiply the lr by --lr_gamma every N epochs");
ABSL_FLAG(double, lr_gamma, kDefaults.lr_gamma, "step: the decay factor");
ABSL_FLAG(int64_t, epochs, kDefaults.epochs, "passes over the training set");
ABSL_FLAG(int64_t, batch_size, kDefaults.batch_size, "examples per rank per step (global batch = this x ranks)");
ABSL_FLAG(int64_t, max_steps, kDefaults.max_steps,
          "stop after this many steps in total, then checkpoint; 0 = no limit");
ABSL_FLAG(int64_t, seed, kDefaults.seed, "model init and data order are functions of this");
ABSL_FLAG(bool, shuffle, kDefaults.shuffle, "reshuffle the training set every epoch");
// Data parallelism.
ABSL_FLAG(std::string, ddp, kDefaults.ddp,
          "which DDP, bottom to top of the ladder in docs/ddp_ladder.md: naive (after backward, one blocking "
          "all_reduce per gradient), flat (after backward, one all_reduce of all gradients packed together), "
          "bucketed (buckets all_reduced from gradient hooks while backward runs), full (DistributedDataParallel) "
          "(naive|flat|bucketed|full)");
ABSL_FLAG(double, bucket_cap_mb, kDefaults.bucket_cap_mb, "bucketed, full: MiB of gradients per bucket");
ABSL_FLAG(double, first_bucket_mb, kDefaults.first_bucket_mb,
          "bucketed, full: MiB of the first bucket (small, so communication starts early in backward)");
ABSL_FLAG(int64_t, grad_accum_steps, kDefaults.grad_accum_steps,
          "gradient accumulation: micro-batches of --batch_size per optimizer step, all but the last under "
          "no_sync (k micro-batches of b train like one batch of k*b; --max_steps counts optimizer steps)");
ABSL_FLAG(bool, find_unused_parameters, kDefaults.find_unused_parameters,
          "full: parameters the forward does not use count as ready (a graph walk per step)");
ABSL_FLAG(std::string, comm_hook, kDefaults.comm_hook,
          "full: how a bucket is averaged: allreduce (DDP's default: an all_reduce, over the copy engines for "
          "large buckets of two GPUs) or bf16 (cast to bfloat16 for the wire, half the bytes) (allreduce|bf16)");
ABSL_FLAG(int64_t, zero, kDefaults.zero,
          "ZeRO stage (docs/zero.md): 0 = plain DDP; 1 shards the optimizer state over the ranks (reduce-scatter, "
          "step 1/N, all-gather), 2 also the gradients, 3 also the parameters (each layer gathered for its forward "
          "and backward); --ddp=full only (0|1|2|3)");
// Beyond data parallelism (wings in dist/parallel/).
ABSL_FLAG(int64_t, tp, kDefaults.tp,
          "tensor parallelism (docs/tensor_parallel.md): each pair of Linears split over this many ranks, the first "
          "by columns, the second by rows, one all_reduce per pair each way; the ranks form a (world/tp) x tp mesh, "
          "data parallelism (DDP, ZeRO-1/2) runs down its columns and --batch_size is per data-parallel replica");
ABSL_FLAG(int64_t, pp, kDefaults.pp,
          "pipeline parallelism (docs/pipeline_parallel.md): the MLP's layers cut into this many stages, one per "
          "rank, microbatches flowing through them by send/recv; the ranks form a (world/pp) x pp mesh, data "
          "parallelism runs down its columns and --batch_size is per data-parallel replica; with --tp the mesh is "
          "dp x pp x tp, each stage split over its tensor-parallel group");
ABSL_FLAG(std::string, pp_schedule, kDefaults.pp_schedule,
          "the pipeline's schedule: gpipe (all forwards, then all backwards), 1f1b (one forward, one backward: at "
          "most --pp microbatches of activations), interleaved (--pp_virtual_stages stages per rank: a smaller "
          "bubble), zb (ZB-H1: each backward split into the input gradient and a weight gradient that fills the "
          "bubble) (gpipe|1f1b|interleaved|zb)");
ABSL_FLAG(int64_t, microbatches, kDefaults.microbatches,
          "microbatches per step of the pipeline (they must divide --batch_size); 0 = --pp; at --pp=1 the "
          "reference every pipeline trains to: the batch cut into this many microbatches, accumulated, one step");
ABSL_FLAG(int64_t, pp_virtual_stages, kDefaults.pp_virtual_stages,
          "--pp_schedule=interleaved: stages per rank (rank r holds stages r, r+pp, ...)");
ABSL_FLAG(bool, join, kDefaults.join,
          "uneven inputs (docs/uneven_inputs.md): the data is not padded, so ranks may have different numbers of "
          "batches; a rank that runs out shadows the others' collectives (PyTorch's Join) instead of hanging them");
ABSL_FLAG(bool, optimizer_in_backward, kDefaults.optimizer_in_backward,
          "the optimizer inside backward (docs/ddp.md): one optimizer per DDP bucket, each stepped as soon as its "
          "bucket's average has arrived, while backward computes the earlier layers (the same results, bit for bit)");
// Data.
ABSL_FLAG(std::string, dataset, kDefaults.dataset,
          "synthetic: a learnable generated problem, no files needed (fashion_mnist|synthetic)");
ABSL_FLAG(std::string, data_dir, kDefaults.data_dir,
          "Fashion-MNIST IDX files (empty: /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)");
ABSL_FLAG(int64_t, synthetic_examples, kDefaults.synthetic_examples, "synthetic: training examples (test: a fifth)");
ABSL_FLAG(int64_t, synthetic_input_size, kDefaults.synthetic_input_size, "synthetic: features per example");
// Output and state.
ABSL_FLAG(int64_t, log_every, kDefaults.log_every, "steps between logged losses");
ABSL_FLAG(std::string, checkpoint_dir, kDefaults.checkpoint_dir,
          "write a checkpoint here after each epoch and at the end");
ABSL_FLAG(int64_t, checkpoint_every, kDefaults.checkpoint_every,
          "also checkpoint every N steps, so a restart loses less; 0 = after each epoch only");
ABSL_FLAG(int64_t, keep_checkpoints, kDefaults.keep_checkpoints, "how many checkpoints to keep in --checkpoint_dir");
ABSL_FLAG(bool, resume, kDefaults.resume, "continue from the latest good checkpoint in --checkpoint_dir");
ABSL_FLAG(bool, preemption, kDefaults.preemption,
          "with --checkpoint_dir: on SIGTERM or SIGUSR1 (a preemption, a time limit, a pod's deletion) every rank "
          "stops after the same step, the run checkpoints and exits with 75, not restarted; --resume continues");
ABSL_FLAG(std::string, init_from, kDefaults.init_from,
          "initial weights: a safetensors state_dict (e.g. from PyTorch)");
ABSL_FLAG(std::string, metrics_out, kDefaults.metrics_out,
          "write JSON lines of metrics here, and a .svg plot beside it");
ABSL_FLAG(std::string, trace, kDefaults.trace, "write a Chrome/Perfetto trace of the run here");
// Execution.
ABSL_FLAG(bool, cuda_graph, kDefaults.cuda_graph,
          "record the whole training step into one CUDA graph after a few eager steps and replay it "
          "(GPU only; says why when it runs eagerly instead; docs/cuda_graphs.md)");

namespace tinyddp::examples {
namespace {

// --help lists the flags in these groups; ParseTrainOptions accepts exactly these.
const std::vector<FlagGroup>& Flags() {
  static const auto* groups = new std::vector<FlagGroup>{
      {"job shape", {"nproc", "backend", "ignore_worker_limits"}},
      {"failures", {"timeout", "max_restarts", "min_replicas", "recovery_window", "allow_nonfinite"}},
      {"model and optimisation",
       {"hidden", "optimizer", "precision", "lr_schedule", "lr", "momentum", "weight_decay", "warmup_steps",
        "lr_step_epochs", "lr_gamma", "epochs", "batch_size", "max_steps", "seed", "shuffle"}},
      {"data parallelism (DDP)",
       {"ddp", "bucket_cap_mb", "first_bucket_mb", "grad_accum_steps", "find_unused_parameters", "comm_hook", "zero",
        "optimizer_in_backward"}},
      {"beyond data parallelism", {"tp", "pp", "pp_schedule", "microbatches", "pp_virtual_stages", "join"}},
      {"data", {"dataset", "data_dir", "synthetic_examples", "synthetic_input_size"}},
      {"output and state",
       {"log_every", "checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume", "preemption", "init_from",
        "metrics_out", "trace"}},
      {"execution", {"cuda_graph"}},
  };
  return *groups;
}

// The flags' values as a TrainOptions. --hidden is text to Abseil; its widths are checked here.
absl::StatusOr<TrainOptions> FromFlags() {
  TrainOptions o;
  o.nproc = absl::GetFlag(FLAGS_nproc);
  o.backend = absl::GetFlag(FLAGS_backend);
  o.ignore_worker_limits = absl::GetFlag(FLAGS_ignore_worker_limits);
  ASSIGN_OR_RETURN(o.timeout, dist::ResolveJobTimeout(absl::GetFlag(FLAGS_timeout), "--timeout"));
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o.allow_nonfinite = absl::GetFlag(FLAGS_allow_nonfinite);
  o.min_replicas = absl::GetFlag(FLAGS_min_replicas);
  o.recovery_window = absl::GetFlag(FLAGS_recovery_window);
  const std::string hidden = absl::GetFlag(FLAGS_hidden);
  o.hidden.clear();
  if (!hidden.empty()) {  // "" is no hidden layer at all: 784-10
    for (absl::string_view piece : absl::StrSplit(hidden, ',')) {
      int64_t width = 0;
      if (!absl::SimpleAtoi(piece, &width) || width <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("--hidden=", hidden,
                                                       ": expected comma-separated positive integers such as "
                                                       "512,512; \"", piece, "\" is not one"));
      }
      o.hidden.push_back(width);
    }
  }
  o.optimizer = absl::GetFlag(FLAGS_optimizer);
  o.precision = absl::GetFlag(FLAGS_precision);
  o.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.momentum = absl::GetFlag(FLAGS_momentum);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.lr_step_epochs = absl::GetFlag(FLAGS_lr_step_epochs);
  o.lr_gamma = absl::GetFlag(FLAGS_lr_gamma);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.shuffle = absl::GetFlag(FLAGS_shuffle);
  o.ddp = absl::GetFlag(FLAGS_ddp);
  o.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  o.first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb);
  o.grad_accum_steps = absl::GetFlag(FLAGS_grad_accum_steps);
  o.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  o.comm_hook = absl::GetFlag(FLAGS_comm_hook);
  o.zero = absl::GetFlag(FLAGS_zero);
  o.tp = absl::GetFlag(FLAGS_tp);
  o.pp = absl::GetFlag(FLAGS_pp);
  o.pp_schedule = absl::GetFlag(FLAGS_pp_schedule);
  o.microbatches = absl::GetFlag(FLAGS_microbatches);
  o.pp_virtual_stages = absl::GetFlag(FLAGS_pp_virtual_stages);
  o.join = absl::GetFlag(FLAGS_join);
  o.optimizer_in_backward = absl::GetFlag(FLAGS_optimizer_in_backward);
  o.dataset = absl::GetFlag(FLAGS_dataset);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.synthetic_examples = absl::GetFlag(FLAGS_synthetic_examples);
  o.synthetic_input_size = absl::GetFlag(FLAGS_synthetic_input_size);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.preemption = absl::GetFlag(FLAGS_preemption);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.metrics_out = absl::GetFlag(FLAGS_metrics_out);
  o.trace = absl::GetFlag(FLAGS_trace);
  o.cuda_graph = absl::GetFlag(FLAGS_cuda_graph);
  return o;
}

absl::Status Check(bool ok, const std::string& flag, const std::string& why) {
  return ok ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

absl::Status Choice(const std::string& value, const std::string& flag, const std::vector<std::string>& choices) {
  for (const std::string& c : choices) {
    if (value == c) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": expected one of ", absl::StrJoin(choices, ", ")));
}

absl::Status Finite(double value, const std::string& flag) {
  return Check(std::isfinite(value), flag, absl::StrCat("must be a finite number, got ", value));
}

// A DDP setting that only some rungs of the ladder have: refused, rather than ignored, on the others.
absl::Status OnlyFor(const TrainOptions& o, const std::string& flag, bool set, const std::vector<std::string>& rungs) {
  if (!set || std::find(rungs.begin(), rungs.end(), o.ddp) != rungs.end()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " applies to --ddp=", absl::StrJoin(rungs, " or --ddp="),
                                                 ", not to --ddp=", o.ddp, ", which has no such setting"));
}

// --pp and its friends (dist/parallel/pipeline/pipeline_flags.h checks them together), then what the pipeline
// path does not combine with, and why.
absl::Status ValidatePipeline(const TrainOptions& o) {
  const dist::pipeline::PipelineFlags flags{o.pp, o.pp_schedule, o.microbatches, o.pp_virtual_stages};
  const bool set = flags.on() || o.pp_schedule != kDefaults.pp_schedule || o.pp_virtual_stages != 1;
  if (!set) return absl::OkStatus();
  if (!flags.on()) {
    return absl::InvalidArgumentError("--pp_schedule and --pp_virtual_stages apply to a pipeline: add --pp=P (or "
                                      "--microbatches=M for the one-stage reference)");
  }
  RETURN_IF_ERROR(dist::pipeline::CheckPipelineFlags(flags, static_cast<int64_t>(o.hidden.size()) + 1, o.batch_size));
  const std::vector<absl::Status> checks = {
      OnlyFor(o, "pp", true, {"full"}),
      Check(o.zero <= 1, "pp",
            "with --zero=2 or 3 is not built (ZeRO-2 keeps a block of DDP's gradient buckets, ZeRO-3 gathers each "
            "layer in every forward; a pipeline has neither); --zero=1 shards each stage's optimizer state over its "
            "replicas: use --zero=1 or --zero=0"),
      Check(o.tp == 1 || o.zero == 0, "pp",
            "with --tp (the 3-D mesh) and --zero is not built (ZeRO-1 would shard the tensor-parallel shards' state "
            "down the columns): drop --zero"),
      Check(o.tp == 1 || o.pp_virtual_stages == 1 || o.checkpoint_dir.empty(), "pp",
            "with --tp, interleaved stages and --checkpoint_dir is not built (a checkpoint gathers one stage per "
            "rank): drop --checkpoint_dir or --pp_virtual_stages"),
      Check(o.grad_accum_steps == 1, "pp",
            "accumulates its --microbatches within each step already: use --microbatches=M (M x the rows of one "
            "microbatch per step) instead of --grad_accum_steps"),
      Check(!o.join && !o.optimizer_in_backward && !o.find_unused_parameters && o.comm_hook == "allreduce", "pp",
            "runs without DDP (the pipeline averages the gradients over the data-parallel replicas once the last "
            "microbatch's backward is done): --join, --optimizer_in_backward, --find_unused_parameters and "
            "--comm_hook do not apply; drop them"),
      Check(!o.cuda_graph, "pp",
            "under a CUDA graph is not built (a step's point-to-point calls wait on the host between stages): drop "
            "--cuda_graph"),
  };
  for (const absl::Status& s : checks) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// The choices, ranges and cross-field checks, first problem first.
absl::Status Validate(const TrainOptions& o) {
  const std::vector<absl::Status> checks = {
      Choice(o.backend, "backend", {"auto", "gloo", "nccl"}),
      Choice(o.optimizer, "optimizer", {"sgd", "adamw"}),
      Choice(o.precision, "precision", {"fp32", "bf16"}),
      Choice(o.lr_schedule, "lr_schedule", {"constant", "step", "cosine"}),
      Choice(o.dataset, "dataset", {"fashion_mnist", "synthetic"}),
      Finite(o.lr, "lr"),
      Finite(o.momentum, "momentum"),
      Finite(o.weight_decay, "weight_decay"),
      Finite(o.lr_gamma, "lr_gamma"),
      Check(o.nproc >= 0 && o.nproc <= 1024, "nproc", absl::StrCat("must be in [0, 1024], got ", o.nproc)),
      Check(o.lr > 0, "lr", absl::StrCat("must be > 0, got ", o.lr)),
      Check(o.momentum >= 0 && o.momentum < 1, "momentum", absl::StrCat("must be in [0, 1), got ", o.momentum)),
      Check(o.weight_decay >= 0, "weight_decay", absl::StrCat("must be >= 0, got ", o.weight_decay)),
      Check(o.warmup_steps >= 0, "warmup_steps", absl::StrCat("must be >= 0, got ", o.warmup_steps)),
      Check(o.lr_step_epochs >= 1, "lr_step_epochs", absl::StrCat("must be >= 1, got ", o.lr_step_epochs)),
      Check(o.lr_gamma > 0 && o.lr_gamma <= 1, "lr_gamma", absl::StrCat("must be in (0, 1], got ", o.lr_gamma)),
      Check(o.epochs >= 1, "epochs", absl::StrCat("must be >= 1, got ", o.epochs)),
      Check(o.batch_size >= 1 && o.batch_size <= (1 << 20), "batch_size",
            absl::StrCat("must be in [1, 1048576], got ", o.batch_size)),
      Check(o.max_steps >= 0, "max_steps", absl::StrCat("must be >= 0 (0 = no limit), got ", o.max_steps)),
      Check(o.seed >= 0, "seed", absl::StrCat("must be >= 0, got ", o.seed)),
      Check(o.zero >= 0 && o.zero <= 3, "zero",
            absl::StrCat("must be 0 (plain DDP), 1 (sharded optimizer state), 2 (and gradients) or 3 (and "
                         "parameters), got ", o.zero)),
      Check(o.zero == 0 || o.comm_hook == "allreduce", "zero",
            "reduce-scatters the buckets itself: it cannot be combined with --comm_hook=bf16"),
      Check(o.zero != 3 || !o.find_unused_parameters, "zero", "--zero=3 shards every layer: every parameter trains"),
      Check(o.synthetic_examples >= 10, "synthetic_examples",
            absl::StrCat("must be >= 10, got ", o.synthetic_examples)),
      Check(o.synthetic_input_size >= 1, "synthetic_input_size",
            absl::StrCat("must be >= 1, got ", o.synthetic_input_size)),
      Check(o.log_every >= 1, "log_every", absl::StrCat("must be >= 1, got ", o.log_every)),
      Check(o.keep_checkpoints >= 1, "keep_checkpoints", absl::StrCat("must be >= 1, got ", o.keep_checkpoints)),
      Check(o.max_restarts >= 0 && o.max_restarts <= 1000, "max_restarts",
            absl::StrCat("must be in [0, 1000], got ", o.max_restarts)),
      Check(o.recovery_window > 0 && o.recovery_window <= 3600, "recovery_window",
            absl::StrCat("must be in (0, 3600] seconds, got ", o.recovery_window)),
      Check(o.checkpoint_every >= 0, "checkpoint_every",
            absl::StrCat("must be >= 0 (0 = after each epoch only), got ", o.checkpoint_every)),
      Check(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(), "checkpoint_every",
            "needs --checkpoint_dir=DIR to write the checkpoints to"),
      Check(!o.resume || !o.checkpoint_dir.empty(), "resume", "needs --checkpoint_dir=DIR to resume from"),
      Check(o.dataset == "fashion_mnist" || o.data_dir.empty(), "data_dir", "only applies to --dataset=fashion_mnist"),
      Choice(o.ddp, "ddp", {"naive", "flat", "bucketed", "full"}),
      Choice(o.comm_hook, "comm_hook", {"allreduce", "bf16"}),
      Check(std::isfinite(o.bucket_cap_mb) && o.bucket_cap_mb > 0, "bucket_cap_mb",
            absl::StrCat("must be > 0 MiB, got ", o.bucket_cap_mb)),
      Check(std::isfinite(o.first_bucket_mb) && o.first_bucket_mb > 0, "first_bucket_mb",
            absl::StrCat("must be > 0 MiB, got ", o.first_bucket_mb)),
      Check(o.grad_accum_steps >= 1 && o.grad_accum_steps <= 65536, "grad_accum_steps",
            absl::StrCat("must be in [1, 65536], got ", o.grad_accum_steps)),
      OnlyFor(o, "bucket_cap_mb", o.bucket_cap_mb != kDefaults.bucket_cap_mb, {"bucketed", "full"}),
      OnlyFor(o, "first_bucket_mb", o.first_bucket_mb != kDefaults.first_bucket_mb, {"bucketed", "full"}),
      OnlyFor(o, "find_unused_parameters", o.find_unused_parameters, {"full"}),
      OnlyFor(o, "comm_hook", o.comm_hook != kDefaults.comm_hook, {"full"}),
      OnlyFor(o, "zero", o.zero != kDefaults.zero, {"full"}),
      Check(o.tp >= 1 && o.tp <= 1024, "tp", absl::StrCat("must be in [1, 1024] ranks per tensor-parallel group, got ", o.tp)),
      OnlyFor(o, "tp", o.tp != kDefaults.tp, {"full"}),
      Check(o.tp == 1 || o.zero != 3, "tp",
            "with --zero=3 is not implemented (ZeRO-3 shards whole Linears; tensor parallelism splits them): use "
            "--zero=1 or --zero=2 across the data-parallel dimension"),
      OnlyFor(o, "join", o.join, {"full"}),
      Check(!o.join || o.zero == 0, "join", "runs under plain DDP (--zero=0): ZeRO's sharded steps have no shadow"),
      Check(!o.join || o.grad_accum_steps == 1, "join",
            "shadows one batch per step: use --grad_accum_steps=1 with it"),
      OnlyFor(o, "optimizer_in_backward", o.optimizer_in_backward, {"full"}),
      Check(!o.optimizer_in_backward || o.zero != 3, "optimizer_in_backward",
            "is not built for --zero=3: ZeRO-3 steps each layer inside its own backward op, already as soon as "
            "its gradient is reduce-scattered; use --zero=1 or --zero=2 (each bucket's shard stepped as its "
            "reduce-scatter lands) or drop the flag"),
      Check(!o.optimizer_in_backward || (o.tp == 1 && !o.join && !o.find_unused_parameters), "optimizer_in_backward",
            "is not built for --tp (its optimizer steps shards of a split model), --join (a shadowing rank steps "
            "after its zero-gradient backward) or --find_unused_parameters (unused gradients are settled only at "
            "the end of backward); run without those"),
  };
  for (const absl::Status& s : checks) {
    RETURN_IF_ERROR(s);
  }
  return ValidatePipeline(o);
}

}  // namespace

std::map<std::string, std::string> TrainOptions::TrajectorySettings(int world_size) const {
  std::map<std::string, std::string> s = {
      {"world_size", absl::StrCat(world_size)},
      {"hidden", absl::StrJoin(hidden, ",")},
      {"optimizer", optimizer},
      {"lr_schedule", lr_schedule},
      {"lr", absl::StrCat(lr)},
      {"weight_decay", absl::StrCat(weight_decay)},
      {"batch_size", absl::StrCat(batch_size)},
      {"seed", absl::StrCat(seed)},
      {"shuffle", shuffle ? "true" : "false"},
      {"dataset", dataset},
  };
  if (optimizer == "sgd") s["momentum"] = absl::StrCat(momentum);
  if (precision != "fp32") s["precision"] = precision;  // absent for fp32, so older checkpoints still resume
  // Likewise recorded only when not the default.
  if (grad_accum_steps != 1) s["grad_accum_steps"] = absl::StrCat(grad_accum_steps);
  if (comm_hook != "allreduce") s["comm_hook"] = comm_hook;
  if (join) s["join"] = "true";  // unpadded shards: other batches than a padded run's
  // The microbatches change how each gradient is summed (not --pp: a checkpoint resumes at any --pp).
  if (pipeline()) s["microbatches"] = absl::StrCat(microbatches > 0 ? microbatches : pp);
  if (dataset == "synthetic") {
    s["synthetic_examples"] = absl::StrCat(synthetic_examples);
    s["synthetic_input_size"] = absl::StrCat(synthetic_input_size);
  }
  // Only the cosine schedule depends on the run's length; extending a constant or step run is fine.
  if (lr_schedule == "cosine") {
    s["epochs"] = absl::StrCat(epochs);
    s["warmup_steps"] = absl::StrCat(warmup_steps);
  }
  if (lr_schedule == "step") {
    s["lr_step_epochs"] = absl::StrCat(lr_step_epochs);
    s["lr_gamma"] = absl::StrCat(lr_gamma);
  }
  return s;
}

absl::StatusOr<TrainOptions> ParseTrainOptions(const std::vector<std::string>& args,
                                               const std::string& working_directory) {
  ASSIGN_OR_RETURN(const CommandLine command_line, ParseCommandLineFlags(args, Flags()));
  if (command_line.help) {
    TrainOptions o;
    o.help = true;
    return o;
  }
  if (!command_line.rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", command_line.rest.front(),
                                                   "\": this program takes flags only (--name=value)"));
  }
  ASSIGN_OR_RETURN(TrainOptions o, FromFlags());
  RETURN_IF_ERROR(Validate(o));
  for (std::string* path : {&o.data_dir, &o.checkpoint_dir, &o.init_from, &o.metrics_out, &o.trace}) {
    *path = ResolveUserPath(*path, working_directory);
  }
  return o;
}

std::string TrainUsage() {
  return absl::StrCat(
      "ddp_mlp: trains an MLP on Fashion-MNIST with DistributedDataParallel, one rank per GPU (NCCL) or\n"
      "2 CPU ranks (Gloo) when started directly; a worker when started by launch, torchrun-style\n"
      "variables, srun or mpirun.\n\n"
      "usage: ddp_mlp [flags]   (--name=value or --name value; booleans also --name, --noname)\n\n",
      FlagsHelp(Flags()),
      "\nexamples:\n"
      "  ./bazelw run //examples:ddp_mlp\n"
      "  ./bazelw run //examples:ddp_mlp -- --epochs=20 --metrics_out=metrics.jsonl --checkpoint_dir=ckpt\n"
      "  ./bazelw run //examples:ddp_mlp -- --checkpoint_dir=ckpt --resume\n"
      "  ./bazelw run //examples:ddp_mlp -- --checkpoint_dir=ckpt --checkpoint_every=200 --max_restarts=2 "
      "--timeout=60s\n"
      "  ./bazelw run //examples:ddp_mlp -- --ddp=naive --epochs=1   # the bottom of the DDP ladder\n"
      "  ./bazelw run //examples:ddp_mlp -- --pp=2 --microbatches=8   # two pipeline stages, 1F1B\n");
}

}  // namespace tinyddp::examples
