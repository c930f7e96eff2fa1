// The optimizer state of ZeRO's shards between its two forms, shared by ZeRO-1/2 (zero_optimizer.h: one
// shard per DDP bucket) and ZeRO-3 (fully_sharded.h: one shard per layer):
//
//   sharded       what training holds: per flat buffer, one optimizer over this rank's block of it, its state
//                 named "state.0.<field>" with one element per element of the block ([shard_numel]), plus
//                 scalars shared by the whole block (Adam's "step").
//   consolidated  what a checkpoint holds: the state of one optimizer over all the module's parameters,
//                 "state.<i>.<field>" shaped like parameter i, exactly what plain DDP's optimizer saves.
//
// Gathering: each sharded field is all-gathered into the whole padded buffer, and each parameter's span of
// it is that parameter's field. Scattering: each rank copies the pieces of each parameter that fall in its
// block (shard_layout.h's PiecesInShard) into a zero-padded block. Both are pure data movement, so a
// gather after a scatter gives back the same bits, whatever the number of ranks on either side.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_SHARD_STATE_H_
#define TINYDDP_DIST_PARALLEL_ZERO_SHARD_STATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/parallel/zero/shard_layout.h"
#include "dist/process_group/process_group.h"
#include "nn/optimizer.h"
#include "nn/tensor_map.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::zero {

/// A parameter as the consolidated state names and shapes it: position i in the module's NamedParameters().
struct ParamInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
};

/// One flat buffer's shard: the parameters laid out in it (ParamSpan::index = position in the ParamInfo
/// list), one rank's block size, and the optimizer that steps this rank's block.
struct ShardedState {
  std::vector<ParamSpan> params;
  int64_t shard_numel = 0;
  nn::Optimizer* optimizer = nullptr;
  DType dtype = DType::kFloat32;
  Device device = Device::CPU();
};

/// Collective over `pg` (every rank, the same shards): the consolidated state of every shard's optimizer.
absl::StatusOr<nn::TensorMap> GatherConsolidatedState(ProcessGroup& pg, const std::vector<ShardedState>& shards,
                                                      const std::vector<ParamInfo>& params);

/// Not collective: loads rank `rank`'s blocks of a consolidated `state` into the shards' optimizers.
/// InvalidArgument, changing nothing, when the state does not fit: unknown parameter or field, wrong shape
/// or dtype, state for a parameter no shard holds, or (Adam) parameters of one shard at different steps.
absl::Status ScatterConsolidatedState(int rank, const std::vector<ShardedState>& shards,
                                      const std::vector<ParamInfo>& params, const nn::TensorMap& state);

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_SHARD_STATE_H_
