// GatherShards: the whole tensor from every tp rank's shard, for checkpoints (a piece of the tensor-parallel
// wing, dist/parallel/tensor/). A checkpoint of a tensor-parallel model must be exactly what one process
// writes, so each sharded parameter (and each optimizer state tensor shaped like one) is gathered whole.
//
// AllGather wants the same number of elements from every rank, and shards may be uneven (shard_range.h: the
// first n % tp ranks hold one more row or column). So each rank sends its shard flattened and padded to the
// largest shard, and the receiver puts every rank's piece in its place (WriteShard), dropping the padding:
// one collective per tensor, at most tp - 1 rows or columns of padding on the wire.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_GATHER_SHARDS_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_GATHER_SHARDS_H_

#include "absl/status/statusor.h"
#include "dist/parallel/tensor/shard_range.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::tensor_parallel {

/// Collective over `group`: every rank passes its shard of a tensor of shape `full_shape` split by `split`
/// (rank r's covering ShardOf(length, group.size(), r)); every rank gets the whole tensor, on shard's device,
/// in its dtype. InvalidArgument (before any collective) when `shard` is not this rank's shard's shape or
/// `split` is kReplicated; the AllGather's error when it fails.
absl::StatusOr<Tensor> GatherShards(ProcessGroup& group, const Tensor& shard, const Shape& full_shape, Split split);

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_GATHER_SHARDS_H_
