// The in-place loop's position and checkpoints (examples/internal/in_place_training.h). Its checkpoints are not
// the plain loop's (train_checkpoint.h): an epoch's length in steps changes with the membership, so the position
// is a sample cursor, and the learning-rate schedule keeps the length it was planned for at the starting replicas.
//   <dir>/in_place-step-N/model.safetensors, optimizer.safetensors   as nn/checkpoint.h writes them
//   <dir>/in_place-step-N/progress.txt                              step, epoch, cursor, planned, replicas
// Written under a temporary name and renamed, so a half-written one never carries the final name.
#ifndef TINYDDP_EXAMPLES_INTERNAL_IN_PLACE_CHECKPOINT_H_
#define TINYDDP_EXAMPLES_INTERNAL_IN_PLACE_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace tinyddp::examples {

// Where the run stands between two steps, and what AdoptLiveState carries besides the tensors.
// `planned`: the replicas the run started with, which the learning-rate schedule's length was planned for (a
// cosine over epochs x steps per epoch at that many replicas); kept through losses and resumes, so that the
// learning rate stays a function of the step alone.
struct Position {
  int64_t step = 0, epoch = 0, cursor = 0;  // cursor: samples of `epoch`'s order already trained on
  int64_t planned = 0;
  std::vector<int64_t> ToVector() const { return {step, epoch, cursor, planned}; }
  static Position From(const std::vector<int64_t>& v) { return {v[0], v[1], v[2], v[3]}; }
};

/// Writes `model`, `optimizer` and `at` (and the number of replicas, for the reader) into <dir>/in_place-step-N.
absl::Status SaveInPlaceCheckpoint(const std::string& dir, const nn::Module& model, const nn::Optimizer& optimizer,
                                   const Position& at, int replicas);

/// The newest in-place checkpoint of `dir` loaded into `model` and `optimizer`; nullopt when there is none.
absl::StatusOr<std::optional<Position>> LoadLatestInPlaceCheckpoint(const std::string& dir, nn::Module& model,
                                                                    nn::Optimizer& optimizer);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_IN_PLACE_CHECKPOINT_H_
