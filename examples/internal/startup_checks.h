// Startup checks: what ddp_mlp's rank 0 verifies about its outputs before the first step, so that a
// mistake costs seconds rather than an epoch: --checkpoint_dir and --trace must be writable (found
// only at the first checkpoint, or the end of the run, otherwise); temporary checkpoint folders left
// by a killed run are removed; and a fresh run may not write into a folder holding another run's
// checkpoints. (--metrics_out is opened at startup anyway; --init_from is loaded at startup.)
//
// Sits between the flags (train_options.h) and the training loop (examples/ddp_mlp.cc).
#ifndef TINYDDP_EXAMPLES_INTERNAL_STARTUP_CHECKS_H_
#define TINYDDP_EXAMPLES_INTERNAL_STARTUP_CHECKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/internal/train_options.h"

namespace tinyddp::examples {

/// `dir` exists (created if missing) and a file can be created in it. Otherwise FailedPrecondition,
/// marked permanent (durable_file.h: not worth a restart): "--<flag>=<dir>: cannot ... (<why>); pick a
/// folder you can write to".
absl::Status CheckWritableFolder(const std::string& dir, const std::string& flag);

/// `path` can be written: its folder exists and is writable, and an existing file there may be
/// replaced. Nothing is left behind. Otherwise FailedPrecondition (permanent) naming the flag and the path.
absl::Status CheckWritableFile(const std::string& path, const std::string& flag);

/// Rank 0's checks before training (see the header comment), for a run that `resuming` (--resume, or
/// an elastic restart) or not. Returns lines worth telling the user (each removed temporary folder).
absl::StatusOr<std::vector<std::string>> PrepareOutputs(const TrainOptions& o, bool resuming);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_STARTUP_CHECKS_H_
