// Exercise 5 (docs/exercises.md): ZeRO-3's forward of one layer (dist/parallel/zero/fully_sharded.h), by
// hand. Each rank keeps only its block of a Linear layer's parameters; the layer is gathered just before it
// computes and must be gone again when the forward returns: that is all ZeRO-3 saves.
#ifndef TINYDDP_TESTS_EXERCISES_SHARDED_LAYER_SHARDED_LAYER_H_
#define TINYDDP_TESTS_EXERCISES_SHARDED_LAYER_SHARDED_LAYER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::exercises {

/// y = x @ W^T + b (x [rows, in], W [out, in], b [out], all float32 on the CPU) for a layer whose parameters
/// are one flat buffer [W row-major (out * in) | b (out) | zeros] of pg.size() equal blocks, of which this
/// rank holds block pg.rank(): `shard`, [ceil((out * in + out) / pg.size())] elements. Collective (every rank
/// calls it, with its own shard). Contract: exactly one collective, an AllGather of the layer; when it returns,
/// nothing of the gathered layer is still alive (the next forward gathers it again). Errors: the AllGather's.
absl::StatusOr<Tensor> ShardedLinearForward(dist::ProcessGroup& pg, const Tensor& shard, const Tensor& x,
                                            int64_t out, int64_t in);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_SHARDED_LAYER_SHARDED_LAYER_H_
