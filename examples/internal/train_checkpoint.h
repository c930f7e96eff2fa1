// Training checkpoints: everything needed to continue a run as if it had never stopped, written so that
// a crash at any moment leaves either the previous checkpoints or a complete new one.
//
// One checkpoint is one folder, named by the number of optimizer steps taken:
//   <dir>/step-00000469/model.safetensors      state_dict, PyTorch names (0.weight [512, 784], 0.bias, ...)
//   <dir>/step-00000469/optimizer.safetensors  optimizer state (state.0.momentum_buffer, ...)
//   <dir>/step-00000469/trainer_state.json     progress (epoch, batch, step), the run's settings, and the
//                                              size and CRC-32 of both files
// model.safetensors loads straight into PyTorch:
//   torch.nn.Sequential(...).load_state_dict(safetensors.torch.load_file(".../model.safetensors"))
//
// Why no RNG state beyond (seed, epoch, batch): nothing in a training step draws random numbers. The
// model's init is a function of the seed, the data order of an epoch a function of (seed, epoch)
// (data/distributed_sampler.h), and the learning rate a function of the step (nn/lr_schedule.h). So the
// progress triple *is* the random state, and resuming replays the same batches in the same order.
//
// Atomicity: the folder is written under a temporary name (each file fsynced, the manifest last), then
// renamed into place, and the parent folder fsynced. A half-written checkpoint never carries a
// step-* name; a damaged one (disk error, truncation, a stray edit) fails its size/CRC check and
// FindLatestGoodCheckpoint skips it with a message, falling back to the previous one.
//
// Sits between nn/checkpoint.h (module and optimizer <-> safetensors) and the training loop.
#ifndef TINYDDP_EXAMPLES_INTERNAL_TRAIN_CHECKPOINT_H_
#define TINYDDP_EXAMPLES_INTERNAL_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace tinyddp::examples {

/// Where a run stands between two steps.
struct TrainingProgress {
  int64_t global_step = 0;     // optimizer steps taken since the start of the run
  int64_t epoch = 0;           // the epoch to continue in
  int64_t batch_in_epoch = 0;  // batches of `epoch` already trained on (0 at an epoch boundary)
  // The train-loss sum and count of those batches (averaged over ranks), so the epoch's summary line
  // after a mid-epoch resume reports the same train loss as an uninterrupted run.
  double epoch_loss_sum = 0;
  double epoch_loss_count = 0;
};

using SettingsMap = std::map<std::string, std::string>;

struct CheckpointInfo {
  std::string path;  // the step-* folder
  TrainingProgress progress;
  SettingsMap settings;  // TrainOptions::TrajectorySettings of the run that wrote it
};

/// The step numbers of the step-* folders in `dir`, newest first (none when `dir` does not exist).
/// Folders are listed whether or not they verify.
std::vector<int64_t> CheckpointSteps(const std::string& dir);

/// "<dir>/step-00000469" for global_step 469.
std::string CheckpointPath(const std::string& dir, int64_t global_step);

/// Writes a checkpoint of `model` and `optimizer` at `progress` into `dir` (created if missing) as
/// described above, replacing one of the same step, then deletes the oldest step-* folders so that
/// `keep` remain. Returns the new folder. Errors name the path and the failing operation.
absl::StatusOr<std::string> SaveTrainingCheckpoint(const std::string& dir, const nn::Module& model,
                                                   const nn::Optimizer& optimizer, const TrainingProgress& progress,
                                                   const SettingsMap& settings, int64_t keep);

/// Reads and verifies a checkpoint folder's manifest: present, valid, and both files with the recorded
/// size and CRC-32. DataLoss (with what is wrong) for a damaged checkpoint, NotFound for a missing one.
absl::StatusOr<CheckpointInfo> VerifyCheckpoint(const std::string& path);

/// The newest checkpoint in `dir` that verifies. Each newer one that does not is reported through
/// `rejected` ("<path>: <why>"). nullopt when `dir` holds no step-* folder at all (or does not exist);
/// DataLoss listing every problem when there are checkpoints but none is good.
absl::StatusOr<std::optional<CheckpointInfo>> FindLatestGoodCheckpoint(const std::string& dir,
                                                                       std::vector<std::string>* rejected);

/// Verifies the checkpoint at `path`, checks that it was written with `expected` settings
/// (FailedPrecondition listing each difference, e.g. "--lr: checkpoint 0.1, this run 0.05"), and loads
/// its weights into `model` and state into `optimizer` (strictly: names, shapes and dtypes must match).
/// Returns the progress to continue from.
absl::StatusOr<TrainingProgress> LoadTrainingCheckpoint(const std::string& path, const SettingsMap& expected,
                                                        nn::Module& model, nn::Optimizer& optimizer);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_TRAIN_CHECKPOINT_H_
