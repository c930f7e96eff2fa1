// GatherShards (dist/parallel/tensor/gather_shards.h): pad, one AllGather, unpad into place.
#include "dist/parallel/tensor/gather_shards.h"

#include "absl/strings/str_cat.h"
#include "tensor/ops.h"

namespace tinyddp::dist::tensor_parallel {

absl::StatusOr<Tensor> GatherShards(ProcessGroup& group, const Tensor& shard, const Shape& full_shape, Split split) {
  if (split == Split::kReplicated) {
    return absl::InvalidArgumentError("GatherShards: a replicated tensor is whole on every rank already");
  }
  const int n = group.size();
  const int64_t length = SplitLength(full_shape, split);
  const Shape mine = ShardShape(full_shape, split, ShardOf(length, n, group.rank()));
  if (shard.shape() != mine) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GatherShards: tp rank ", group.rank(), " of ", n, " holds ", ShapeToString(shard.shape()), " of ",
        ShapeToString(full_shape), " split by ", SplitName(split), ", but its shard is ", ShapeToString(mine)));
  }
  // Elements per index of the split dimension: a row (kRows) or a column (kColumns: full_shape[0] of them).
  int64_t whole = 1;
  for (int64_t d : full_shape) whole *= d;
  const int64_t per_index = length == 0 ? 0 : whole / length;
  const int64_t padded = ShardOf(length, n, 0).size() * per_index;  // rank 0's is the largest
  Tensor send = Tensor::Zeros({padded}, shard.dtype(), shard.device());
  Tensor head = send.Rows(0, shard.numel());
  ops::CopyInto(head, shard.Flatten());
  Tensor all = Tensor::Empty({n * padded}, shard.dtype(), shard.device());
  if (absl::Status s = group.AllGather(all, send)->Wait(); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("gathering a ", ShapeToString(full_shape), " tensor from its shards: ", s.message()));
  }
  Tensor full = Tensor::Empty(full_shape, shard.dtype(), shard.device());
  for (int r = 0; r < n; ++r) {
    const ShardRange range = ShardOf(length, n, r);
    const Shape shape = ShardShape(full_shape, split, range);
    const Tensor piece = all.Rows(r * padded, r * padded + range.size() * per_index).View(shape);
    WriteShard(full, piece, split, range);
  }
  return full;
}

}  // namespace tinyddp::dist::tensor_parallel
