// TrainOptions: see train_options.h.
#include "examples/internal/train_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "examples/internal/flag_parser.h"
#include "examples/internal/user_path.h"

namespace tinyddp::examples {
namespace {

// Registers every flag on `parser`, bound to the fields of `o` (whose current values are the defaults).
void BindFlags(FlagParser& parser, TrainOptions& o) {
  parser.AddInt("nproc", &o.nproc, "ranks to start when not under a launcher; 0 = one per GPU, or 2 on CPU");
  parser.AddChoice("backend", &o.backend, {"auto", "gloo", "nccl"},
                   "collectives: nccl on GPUs, gloo on CPU; auto picks nccl when there is a GPU");
  parser.AddIntList("hidden", &o.hidden, "hidden layer widths of the MLP 784-...-10");
  parser.AddChoice("optimizer", &o.optimizer, {"sgd", "adamw"}, "sgd uses --momentum");
  parser.AddChoice("lr_schedule", &o.lr_schedule, {"constant", "step", "cosine"}, "learning rate over the run");
  parser.AddDouble("lr", &o.lr, "base learning rate");
  parser.AddDouble("momentum", &o.momentum, "SGD momentum");
  parser.AddDouble("weight_decay", &o.weight_decay, "L2 penalty (sgd) or decoupled weight decay (adamw)");
  parser.AddInt("warmup_steps", &o.warmup_steps, "cosine: linear warmup over this many steps");
  parser.AddInt("lr_step_epochs", &o.lr_step_epochs, "step: multiply the lr by --lr_gamma every N epochs");
  parser.AddDouble("lr_gamma", &o.lr_gamma, "step: the decay factor");
  parser.AddInt("epochs", &o.epochs, "passes over the training set");
  parser.AddInt("batch_size", &o.batch_size, "examples per rank per step (global batch = this x ranks)");
  parser.AddInt("max_steps", &o.max_steps, "stop after this many steps in total, then checkpoint; 0 = no limit");
  parser.AddInt("seed", &o.seed, "model init and data order are functions of this");
  parser.AddBool("shuffle", &o.shuffle, "reshuffle the training set every epoch");
  parser.AddChoice("dataset", &o.dataset, {"fashion_mnist", "synthetic"},
                   "synthetic: a learnable generated problem, no files needed");
  parser.AddString("data_dir", &o.data_dir,
                   "Fashion-MNIST IDX files (empty: /usr/share/datasets/fashion-mnist, Debian's "
                   "dataset-fashion-mnist)");
  parser.AddInt("synthetic_examples", &o.synthetic_examples, "synthetic: training examples (test: a fifth)");
  parser.AddInt("synthetic_input_size", &o.synthetic_input_size, "synthetic: features per example");
  parser.AddInt("log_every", &o.log_every, "steps between logged losses");
  parser.AddString("checkpoint_dir", &o.checkpoint_dir, "write a checkpoint here after each epoch and at the end");
  parser.AddInt("keep_checkpoints", &o.keep_checkpoints, "how many checkpoints to keep in --checkpoint_dir");
  parser.AddBool("resume", &o.resume, "continue from the latest good checkpoint in --checkpoint_dir");
  parser.AddString("init_from", &o.init_from, "initial weights: a safetensors state_dict (e.g. from PyTorch)");
  parser.AddString("metrics_out", &o.metrics_out, "write JSON lines of metrics here, and a .svg plot beside it");
  parser.AddString("trace", &o.trace, "write a Chrome/Perfetto trace of the run here");
}

absl::Status Check(bool ok, const std::string& flag, const std::string& why) {
  return ok ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

// The cross-field and range checks, first problem first.
absl::Status Validate(const TrainOptions& o) {
  const std::vector<absl::Status> checks = {
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
      Check(o.synthetic_examples >= 10, "synthetic_examples",
            absl::StrCat("must be >= 10, got ", o.synthetic_examples)),
      Check(o.synthetic_input_size >= 1, "synthetic_input_size",
            absl::StrCat("must be >= 1, got ", o.synthetic_input_size)),
      Check(o.log_every >= 1, "log_every", absl::StrCat("must be >= 1, got ", o.log_every)),
      Check(o.keep_checkpoints >= 1, "keep_checkpoints", absl::StrCat("must be >= 1, got ", o.keep_checkpoints)),
      Check(!o.resume || !o.checkpoint_dir.empty(), "resume", "needs --checkpoint_dir=DIR to resume from"),
      Check(o.dataset == "fashion_mnist" || o.data_dir.empty(), "data_dir", "only applies to --dataset=fashion_mnist"),
  };
  for (const absl::Status& s : checks) {
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
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
  TrainOptions o;
  FlagParser parser("ddp_mlp");
  BindFlags(parser, o);
  RETURN_IF_ERROR(parser.Parse(args, &o.help));
  if (o.help) return o;
  RETURN_IF_ERROR(Validate(o));
  for (std::string* path : {&o.data_dir, &o.checkpoint_dir, &o.init_from, &o.metrics_out, &o.trace}) {
    *path = ResolveUserPath(*path, working_directory);
  }
  return o;
}

std::string TrainUsage() {
  TrainOptions defaults;
  FlagParser parser("ddp_mlp");
  BindFlags(parser, defaults);
  return absl::StrCat(
      "ddp_mlp: trains an MLP on Fashion-MNIST with DistributedDataParallel, one rank per GPU (NCCL) or\n"
      "2 CPU ranks (Gloo) when started directly; a worker when started by launch, torchrun-style\n"
      "variables, srun or mpirun.\n\n",
      parser.Usage(),
      "\nexamples:\n"
      "  ./bazelw run //examples:ddp_mlp\n"
      "  ./bazelw run //examples:ddp_mlp -- --epochs=20 --metrics_out=metrics.jsonl --checkpoint_dir=ckpt\n"
      "  ./bazelw run //examples:ddp_mlp -- --checkpoint_dir=ckpt --resume\n");
}

}  // namespace tinyddp::examples
