// TrainOptions: everything examples/ddp_mlp.cc can be told on its command line, parsed and checked.
//
// The flags are Abseil flags (ABSL_FLAG in train_options.cc, one per field below, with the field's
// default); ParseTrainOptions reads argv into them (base/command_line.h does the syntax), copies them
// into a TrainOptions and checks the values together: ranges, choices, flags that need each other
// (--resume needs --checkpoint_dir), and resolves relative paths against the folder `bazel run` was
// typed in (user_path.h). The rest of the program only sees the plain struct. Every problem is an
// InvalidArgument that names the flag and says why; main() prints it and exits with status 2.
//
// The defaults are the "newcomer run": `./bazelw run //examples:ddp_mlp` on 2 CPU cores finishes in
// under two minutes above 87% test accuracy on Fashion-MNIST (docs/ddp_mlp.md has the measurements).
#ifndef TINYDDP_EXAMPLES_INTERNAL_TRAIN_OPTIONS_H_
#define TINYDDP_EXAMPLES_INTERNAL_TRAIN_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tinyddp::examples {

struct TrainOptions {
  // Job shape (read before workers start; see SpawnOptionsFor in ddp_mlp.cc).
  int64_t nproc = 0;             // 0: one rank per GPU, or 2 CPU ranks
  std::string backend = "auto";  // auto | gloo | nccl
  bool ignore_worker_limits = false;  // start --nproc ranks even if the machine cannot hold them

  // Failures (docs/ddp_mlp.md, "When things go wrong").
  /// --timeout, resolved (dist/worker/job_timeout.h): the flag, else TINYDDP_TIMEOUT, else 300 s.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  int64_t max_restarts = 0;       // when a rank fails, restart all this often (resuming from --checkpoint_dir)
  bool allow_nonfinite = false;   // train on through a NaN/Inf loss instead of stopping
  int64_t min_replicas = 0;       // keep training in place while this many replicas live (0: off; dist/elastic/in_place)
  double recovery_window = 2;     // --min_replicas: seconds the survivors of a loss wait for each other

  // Model and optimisation.
  std::vector<int64_t> hidden = {512, 512};
  std::string optimizer = "sgd";       // sgd (with momentum) | adamw
  std::string precision = "fp32";      // fp32 | bf16 (mixed: bfloat16 compute, float32 masters; nn/precision.h)
  std::string lr_schedule = "cosine";  // constant | step | cosine
  double lr = 0.08;
  double momentum = 0.9;       // SGD only
  double weight_decay = 0.0;   // SGD: L2 added to the gradient; AdamW: decoupled decay
  int64_t warmup_steps = 0;    // cosine only: linear warmup steps
  int64_t lr_step_epochs = 1;  // step only: decay every this many epochs ...
  double lr_gamma = 0.5;       // ... by this factor
  int64_t epochs = 4;
  int64_t batch_size = 64;  // per rank
  int64_t max_steps = 0;    // stop after this many optimizer steps in total (0: no limit)
  int64_t seed = 0;
  bool shuffle = true;
  int64_t zero = 0;  // ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the parameters
  int64_t tp = 1;     // tensor-parallel ranks per data-parallel replica (dist/parallel/tensor)
  // Pipeline parallelism (dist/parallel/pipeline): stages per data-parallel replica, the schedule, the
  // microbatches of a step (0: --pp) and the stages per rank of the interleaved schedule.
  int64_t pp = 1;
  std::string pp_schedule = "1f1b";
  int64_t microbatches = 0;
  int64_t pp_virtual_stages = 1;
  /// The pipeline path runs (dist/parallel/pipeline/pipeline_flags.h): --pp > 1, or --microbatches given.
  bool pipeline() const { return pp > 1 || microbatches > 0; }
  bool join = false;  // uneven inputs: no padding, ranks that ran out shadow the others (dist/parallel/join)
  bool optimizer_in_backward = false;  // each bucket's update as its all_reduce lands (dist/accel/fused_optimizer)

  // Data parallelism: which DDP of the ladder (docs/ddp_ladder.md), and DDP's own settings.
  std::string ddp = "full";             // naive | flat | bucketed | full (DistributedDataParallel)
  double bucket_cap_mb = 25;            // bucketed, full: bucket size (PyTorch's bucket_cap_mb)
  double first_bucket_mb = 1;           // bucketed, full: the first bucket's size
  int64_t grad_accum_steps = 1;         // micro-batches per optimizer step: k x batch_size == 1 x k*batch_size
  bool find_unused_parameters = false;  // full only
  std::string comm_hook = "allreduce";  // full only: allreduce (DDP's default path) | bf16 (compressed)

  // Data.
  std::string dataset = "fashion_mnist";  // fashion_mnist | synthetic
  std::string data_dir;                   // "" = /usr/share/datasets/fashion-mnist
  int64_t synthetic_examples = 10000;     // synthetic: training examples (the test split has a fifth)
  int64_t synthetic_input_size = 784;     // synthetic: features per example

  // Output and state.
  int64_t log_every = 50;      // steps between loss lines / JSONL records
  std::string checkpoint_dir;  // "" = no checkpoints
  int64_t checkpoint_every = 0;  // also checkpoint every this many steps (0: after each epoch only)
  int64_t keep_checkpoints = 3;
  bool resume = false;
  bool preemption = true;   // with checkpoint_dir: SIGTERM/SIGUSR1 stop every rank, checkpoint, exit 75 (preemption.h)
  std::string init_from;    // a .safetensors state_dict to start from
  std::string metrics_out;  // a .jsonl file; the plot goes next to it as .svg
  std::string trace;        // a Chrome trace .json

  // Execution.
  bool cuda_graph = false;  // replay the whole step as one CUDA graph (dist/accel/graph/graphed_step.h); same results

  bool help = false;  // --help was given: print TrainUsage() and exit 0

  /// The settings that decide the sequence of parameters a run produces, as name -> text. A checkpoint
  /// records them, and --resume refuses to continue under different ones (the result would match
  /// neither run). `world_size` is part of it: it changes the data each step sees. It is the number of
  /// data-parallel replicas (the world's ranks / --tp): tensor parallelism splits layers, not data, so a
  /// checkpoint resumes at any --tp with the same number of replicas.
  std::map<std::string, std::string> TrajectorySettings(int world_size) const;
};

/// Parses and checks `args` (argv without argv[0]), starting from the defaults above on every call (the
/// Abseil flags are restored before it returns). Relative paths are resolved against
/// `working_directory` (pass $BUILD_WORKING_DIRECTORY, or "" to keep them relative).
absl::StatusOr<TrainOptions> ParseTrainOptions(const std::vector<std::string>& args,
                                               const std::string& working_directory);

/// The --help text: every flag, grouped, with its default.
std::string TrainUsage();

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_TRAIN_OPTIONS_H_
