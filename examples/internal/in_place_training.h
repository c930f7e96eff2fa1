// TrainInPlace: ddp_mlp's training loop under --min_replicas=K (dist/elastic/in_place, docs/fault_tolerance.md).
// The same model, optimizer, schedule and data as the plain loop (BuildSetup), trained by plain DDP, with what
// it takes to lose a replica and keep training:
//
//   for each step:   this member's slice of the epoch (data_rule.h) -> zero_grad, forward, backward (DDP's
//                    all_reduce) -> if every bucket's all_reduce succeeded: optimizer step, cursor moves on
//   a failed step:   DDP dropped (its partial gradients with it) -> ReplicaGroup::Shrink (abort, quorum, a new
//                    Gloo group of the survivors) -> AdoptLiveState from the source -> a new DDP -> the step
//                    is run again by the survivors, from the same cursor
//   fewer than K:    the source writes an in-place checkpoint (with --checkpoint_dir) and the job fails
//
// Its checkpoints are its own (<dir>/in_place-step-N/: model and optimizer safetensors, progress.txt with the
// step, epoch and sample cursor), since an epoch's length in steps changes with the membership; --resume reads
// the newest. --trace=PREFIX writes each replica's step and recovery phases to PREFIX.replica<id>.jsonl (the
// picture in docs/fault_tolerance.md is drawn from those).
#ifndef TINYDDP_EXAMPLES_INTERNAL_IN_PLACE_TRAINING_H_
#define TINYDDP_EXAMPLES_INTERNAL_IN_PLACE_TRAINING_H_

#include "absl/status/status.h"
#include "examples/internal/train_options.h"
#include "examples/internal/train_setup.h"

namespace tinyddp::examples {

/// Trains as described above. Errors: fewer than --min_replicas replicas remain, this replica was left out
/// of the group, or anything the plain loop can fail with.
absl::Status TrainInPlace(const TrainOptions& options, Job& job);

/// A worker's life under --min_replicas (ddp_mlp's RunWorker hands it the job, giving up its own handle on the
/// group: a loss replaces it): TrainInPlace, an error printed and recorded for the launcher's blame. The
/// process's exit status: 0 when training finished, 1 otherwise.
int RunInPlaceWorker(const TrainOptions& options, Job job);

/// True in a replacement the launcher started for a lost replica (TINYDDP_IN_PLACE_REPLACEMENT, keep_going.h).
bool IsInPlaceReplacement();
/// A replacement's life: no world to join (the others are training), so it connects to the job's store, asks to
/// join the replica group, takes a member's live state and trains on as that replica. Exit status as above.
int RunInPlaceReplacement(const TrainOptions& options);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_IN_PLACE_TRAINING_H_
