// Training checkpoints: everything needed to continue a run as if it had never stopped, written so that
// a crash at any moment leaves either the previous checkpoints or a complete new one.
//
// One checkpoint is one folder, named by the number of optimizer steps taken:
//   <dir>/step-00000469/model.safetensors      state_dict, PyTorch names (0.weight [512, 784], 0.bias, ...)
//   <dir>/step-00000469/optimizer.safetensors  optimizer state (state.0.momentum_buffer, ...)
//   <dir>/step-00000469/trainer_state.json     progress (epoch, batch, step), the run's settings, the
//                                              size and CRC-32 of both files, and a CRC-32 of itself
// model.safetensors loads straight into PyTorch:
//   torch.nn.Sequential(...).load_state_dict(safetensors.torch.load_file(".../model.safetensors"))
//
// Why no RNG state beyond (seed, epoch, batch): nothing in a training step draws random numbers. The
// model's init is a function of the seed, the data order of an epoch a function of (seed, epoch)
// (data/distributed_sampler.h), and the learning rate a function of the step (nn/lr_schedule.h). So the
// progress triple *is* the random state, and resuming replays the same batches in the same order.
// One more thing decides the bits: where each gradient sits in DDP's buckets, which changes once, after
// the first step (dist/ddp/reducer.h). At 3+ ranks the all_reduce rounds an element by its position, so
// the progress also records that layout (bucket_order) and a resumed DDP starts from it
// (docs/exactness.md).
//
// Atomicity: the folder is written under a temporary name (each file fsynced, the manifest last), then
// renamed into place, and the parent folder fsynced. A half-written checkpoint never carries a
// step-* name (a kill leaves a .tmp-step-* folder, which RemoveStaleTemporaries clears at the next
// start); a damaged one (disk error, truncation, a stray edit) fails its size/CRC check and
// FindLatestGoodCheckpoint skips it with a message, falling back to the previous one. The progress is
// also range-checked (batch_in_epoch below steps_per_epoch, global_step = epoch * steps_per_epoch +
// batch_in_epoch, ...), so that even a manifest whose checksum was recomputed cannot send a resumed run
// past its end or into a loop. A file that is not a regular one (a FIFO in place of trainer_state.json)
// is refused at once, not waited on.
//
// Retention (--keep_checkpoints) counts only checkpoints that verify: a new one must read back as written
// before anything is deleted, and the newest `keep` good ones stay with every damaged one newer than
// them, so a damaged checkpoint (say, of a higher step than the run now writes) can never make retention
// delete the last good one. A write that fails because the folder cannot take it (a full disk, a
// read-only file system) is marked permanent (durable_file.h): a restart would fail the same way.
//
// The format version (trainer_state.json's "version"), and what each one adds:
//   1  progress, the run's settings, and "files": the size and CRC-32 of every data file.
//   2  progress.steps_per_epoch, and "crc32": the CRC-32 of the manifest's compact JSON without that
//      field, so that an edited trainer state ("epoch": 1 -> 3) is refused like a damaged model file.
//      Version-1 checkpoints still load (range checks against this run), with a notice. A manifest that
//      says 1 but has a field of version 2 had its version lowered by hand, which would switch the
//      checksum off: it is refused like a damaged one.
//   3  progress.bucket_order: DDP's bucket layout (Reducer::LayoutOrder), so that a resumed run's first
//      step sums every gradient element in the order the uninterrupted run does. Version-2 checkpoints still
//      load; their resumed run starts from the first-step layout and is equal to an uninterrupted one only up
//      to the order of a sum at 3+ ranks (said when it happens).
// A later version may list more data files (every file in "files" is verified, whatever its name) and
// say how to read them; a reader refuses versions newer than its own with a message saying so, and the
// refusal falls back to an older checkpoint. (ZeRO-1 needs none: it consolidates its shards into the same
// two files before saving, so its checkpoints are plain ones and resume at any number of ranks.)
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

/// The version SaveTrainingCheckpoint writes; VerifyCheckpoint reads 1 to this.
inline constexpr int kCheckpointVersion = 3;

/// Where a run stands between two steps.
struct TrainingProgress {
  int64_t global_step = 0;     // optimizer steps taken since the start of the run
  int64_t epoch = 0;           // the epoch to continue in
  int64_t batch_in_epoch = 0;  // batches of `epoch` already trained on (0 at an epoch boundary)
  // The train-loss sum and count of those batches (averaged over ranks), so the epoch's summary line
  // after a mid-epoch resume reports the same train loss as an uninterrupted run.
  double epoch_loss_sum = 0;
  double epoch_loss_count = 0;
  /// Steps in one epoch of the run (set by the caller before saving; from the dataset's size, the batch
  /// size and the number of ranks). 0 when unknown: a version-1 checkpoint.
  int64_t steps_per_epoch = 0;
  /// DDP's bucket layout at this step (dist::Reducer::LayoutOrder(): dotted parameter names in gradient
  /// order; empty when there is none to keep: before the first step, the ladder's rungs, ZeRO-3). A resumed
  /// run passes it to DdpOptions::bucket_order.
  std::vector<std::string> bucket_order;
};

using SettingsMap = std::map<std::string, std::string>;

struct CheckpointInfo {
  std::string path;  // the step-* folder
  int version = kCheckpointVersion;  // of its manifest
  TrainingProgress progress;
  SettingsMap settings;  // TrainOptions::TrajectorySettings of the run that wrote it
};

/// The step numbers of the step-* folders in `dir`, newest first (none when `dir` does not exist).
/// Folders are listed whether or not they verify.
std::vector<int64_t> CheckpointSteps(const std::string& dir);

/// "<dir>/step-00000469" for global_step 469.
std::string CheckpointPath(const std::string& dir, int64_t global_step);

/// Writes a checkpoint of `model` and `optimizer` at `progress` into `dir` (created if missing) as
/// described above, replacing one of the same step, verifies it, then deletes the step-* folders older
/// than the newest `keep` that verify. Returns the new folder. Errors name the path and the failing
/// operation; one the folder cannot take (full, read-only) is marked permanent (IsPermanent); DataLoss
/// when the new checkpoint does not read back as written (then nothing is deleted).
/// Precondition: `progress` passes the range checks (InvalidArgument otherwise, nothing written).
absl::StatusOr<std::string> SaveTrainingCheckpoint(const std::string& dir, const nn::Module& model,
                                                   const nn::Optimizer& optimizer, const TrainingProgress& progress,
                                                   const SettingsMap& settings, int64_t keep);

/// Reads and verifies a checkpoint folder's manifest: present, a regular file, valid, its own checksum
/// (version 2), no field of a version later than it says, progress within range, and both files with the
/// recorded size and CRC-32. DataLoss (with what is wrong) for a damaged checkpoint, FailedPrecondition
/// for a version newer than this reader's or a manifest that is not a regular file.
absl::StatusOr<CheckpointInfo> VerifyCheckpoint(const std::string& path);

/// The newest checkpoint in `dir` that verifies. Each newer one that does not is reported through
/// `rejected` ("<path>: <why>"). nullopt when `dir` holds no step-* folder at all (or does not exist);
/// DataLoss listing every problem when there are checkpoints but none is good.
absl::StatusOr<std::optional<CheckpointInfo>> FindLatestGoodCheckpoint(const std::string& dir,
                                                                       std::vector<std::string>* rejected);

/// Verifies the checkpoint at `path`, checks that it was written with `expected` settings
/// (FailedPrecondition listing each difference, e.g. "--lr: checkpoint 0.1, this run 0.05") and with
/// this run's `steps_per_epoch` (FailedPrecondition; for a version-1 checkpoint its progress must fit
/// them, else DataLoss), and loads its weights into `model` and state into `optimizer` (strictly: names,
/// shapes and dtypes must match). Returns the progress to continue from.
absl::StatusOr<TrainingProgress> LoadTrainingCheckpoint(const std::string& path, const SettingsMap& expected,
                                                        int64_t steps_per_epoch, nn::Module& model,
                                                        nn::Optimizer& optimizer);

/// Removes the temporary folders (.tmp-step-*) that a write interrupted by a kill left in `dir`, and
/// returns their paths. Call at the start of a run, before anything writes to `dir`.
std::vector<std::string> RemoveStaleTemporaries(const std::string& dir);

/// Why `p` cannot be where a run stands ("batch_in_epoch 1000000000000000 is not below steps_per_epoch
/// 19"), or "" when it passes. `steps_per_epoch` 0 skips the checks that need it.
std::string ProgressProblem(const TrainingProgress& p, int64_t steps_per_epoch);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_TRAIN_CHECKPOINT_H_
