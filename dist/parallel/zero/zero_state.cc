// ZeroRedundancyOptimizer (dist/parallel/zero/zero_optimizer.h): the optimizer state between its sharded
// form (one optimizer per bucket over this rank's block) and the consolidated form checkpoints hold. The
// movement itself is shard_state.h's, shared with ZeRO-3; here are the shards it moves, one per bucket.
#include <vector>

#include "base/status_macros.h"
#include "dist/parallel/zero/shard_state.h"
#include "dist/parallel/zero/zero_optimizer.h"

namespace tinyddp::dist::zero {

absl::StatusOr<nn::TensorMap> ZeroRedundancyOptimizer::ConsolidatedStateTensors() {
  // (When DDP rebuilt its buckets at a Forward whose backward has not run yet, the shards still hold the old
  // layout, whose state is just as complete: the parameters move only at that backward's end.)
  if (!status_.ok()) return status_;  // the shards disagree across ranks: there is no one state to save
  RETURN_IF_ERROR(GatherMasters());  // bf16: the module's float32 parameters, for the model file
  return GatherState();
}

absl::Status ZeroRedundancyOptimizer::LoadConsolidatedStateTensors(const nn::TensorMap& state) {
  return ScatterState(state);
}

ShardedState ZeroRedundancyOptimizer::StateOf(const Shard& s) {
  return {s.params, s.shard_numel, s.optimizer.get(), s.flat.dtype(), s.flat.device()};
}

std::vector<ShardedState> ZeroRedundancyOptimizer::States() const {
  std::vector<ShardedState> states;
  for (const Shard& s : shards_) states.push_back(StateOf(s));
  return states;
}

std::vector<ParamInfo> ZeroRedundancyOptimizer::Params() const {
  std::vector<ParamInfo> infos;
  for (const auto& [name, p] : params_) infos.push_back({name, p.shape(), p.dtype()});
  return infos;
}

absl::StatusOr<nn::TensorMap> ZeroRedundancyOptimizer::GatherState() {
  return GatherConsolidatedState(pg_, States(), Params());
}

absl::Status ZeroRedundancyOptimizer::ScatterState(const nn::TensorMap& state) {
  return ScatterConsolidatedState(pg_.rank(), States(), Params(), state);
}

}  // namespace tinyddp::dist::zero
