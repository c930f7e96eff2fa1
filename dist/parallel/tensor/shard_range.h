// Which rows or columns of a weight each tensor-parallel rank owns, and the copies between a whole tensor
// and one rank's shard. A piece of the tensor-parallel wing (dist/parallel/tensor/, docs/tensor_parallel.md).
//
// A Linear's weight W [out, in] is cut one of two ways (Megatron-LM, Shoeybi et al. 2019):
//   kRows     rank r holds rows [begin_r, end_r) of W and of the bias: a column-parallel layer computes
//             those output features whole (the name is Megatron's: the split is along W^T's columns).
//   kColumns  rank r holds columns [begin_r, end_r) of W: a row-parallel layer computes a partial sum of
//             every output feature, from its slice of the input features.
// Sizes need not divide: the first n % tp ranks get one more (ShardOf), as torch.chunk would not but
// torch.tensor_split does. Megatron refuses uneven sizes; allowing them costs nothing here but padding in
// the gathers (gather_shards.h), and lets any --hidden list run at any tp.
//
// Tensors are contiguous in tinyddp (no strided views), so a block of columns is not a view: SliceShard
// and WriteShard copy it row by row (one CopyInto per row, on any device). They run only when a model is
// built, loaded or gathered for a checkpoint, never in a training step.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_SHARD_RANGE_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_SHARD_RANGE_H_

#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace tinyddp::dist::tensor_parallel {

/// How one parameter is split over the tp group.
enum class Split { kReplicated, kRows, kColumns };
/// "replicated", "rows", "columns".
const char* SplitName(Split split);

/// The half-open range [begin, end) of indices one rank owns.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  std::string ToString() const;  // "[4, 7)"
};

/// Rank `rank`'s share of n indices cut over `size` ranks: ranks below n % size get ceil(n / size), the
/// others floor(n / size); consecutive, in rank order. Preconditions: size >= 1, 0 <= rank < size, n >= 0.
ShardRange ShardOf(int64_t n, int size, int rank);

/// The length of the dimension `split` cuts in a tensor of shape `full`: full[0] for kRows, full[1] for
/// kColumns, 0 for kReplicated.
int64_t SplitLength(const Shape& full, Split split);
/// The shape of the shard covering `range` of a tensor of shape `full`.
Shape ShardShape(const Shape& full, Split split, ShardRange range);

/// A new tensor holding `range` of `full` along `split` (rows: [range) of dim 0; columns: [range) of dim 1
/// of a 2-D tensor), on full's device. kReplicated: a copy of the whole.
Tensor SliceShard(const Tensor& full, Split split, ShardRange range);
/// Writes `shard` (shaped ShardShape(full.shape(), split, range)) into its place in `full`; any devices.
void WriteShard(Tensor& full, const Tensor& shard, Split split, ShardRange range);

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_SHARD_RANGE_H_
