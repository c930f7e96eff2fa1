// Shard ranges and the copies between a whole tensor and a shard (dist/parallel/tensor/shard_range.h).
#include "dist/parallel/tensor/shard_range.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

constexpr char kOp[] = "tensor_parallel::Shard";

void CheckColumns(const Shape& full, Split split) {
  TINYDDP_CHECK_OP(split != Split::kColumns || full.size() == 2, kOp, "a split by columns needs a 2-D tensor, got ",
                   ShapeToString(full));
  TINYDDP_CHECK_OP(split != Split::kRows || !full.empty(), kOp, "a split by rows needs at least 1-D, got a scalar");
}

}  // namespace

const char* SplitName(Split split) {
  switch (split) {
    case Split::kRows:
      return "rows";
    case Split::kColumns:
      return "columns";
    case Split::kReplicated:
      break;
  }
  return "replicated";
}

std::string ShardRange::ToString() const { return absl::StrCat("[", begin, ", ", end, ")"); }

ShardRange ShardOf(int64_t n, int size, int rank) {
  TINYDDP_CHECK_OP(size >= 1 && rank >= 0 && rank < size && n >= 0, kOp, "ShardOf(n=", n, ", size=", size,
                   ", rank=", rank, "): needs size >= 1, 0 <= rank < size, n >= 0");
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return ShardRange{begin, begin + base + (rank < extra ? 1 : 0)};
}

int64_t SplitLength(const Shape& full, Split split) {
  CheckColumns(full, split);
  if (split == Split::kRows) return full[0];
  if (split == Split::kColumns) return full[1];
  return 0;
}

Shape ShardShape(const Shape& full, Split split, ShardRange range) {
  CheckColumns(full, split);
  Shape shape = full;
  if (split == Split::kRows) shape[0] = range.size();
  if (split == Split::kColumns) shape[1] = range.size();
  return shape;
}

Tensor SliceShard(const Tensor& full, Split split, ShardRange range) {
  TINYDDP_CHECK_OP(split == Split::kReplicated || (range.begin >= 0 && range.end <= SplitLength(full.shape(), split)),
                   kOp, "range ", range.ToString(), " is outside ", ShapeToString(full.shape()), " split by ",
                   SplitName(split));
  if (split == Split::kReplicated) return full.Clone();
  if (split == Split::kRows) return full.Rows(range.begin, range.end).Clone();
  const int64_t rows = full.size(0);
  Tensor shard = Tensor::Empty({rows, range.size()}, full.dtype(), full.device());
  for (int64_t i = 0; i < rows; ++i) {  // row i of the shard is a contiguous piece of row i of the whole
    Tensor to = shard.Rows(i, i + 1).Flatten();
    ops::CopyInto(to, full.Rows(i, i + 1).Flatten().Rows(range.begin, range.end));
  }
  return shard;
}

void WriteShard(Tensor& full, const Tensor& shard, Split split, ShardRange range) {
  const Shape want = ShardShape(full.shape(), split, range);
  TINYDDP_CHECK_OP(shard.shape() == want, kOp, "the shard is ", ShapeToString(shard.shape()), ", but range ",
                   range.ToString(), " of ", ShapeToString(full.shape()), " split by ", SplitName(split), " is ",
                   ShapeToString(want));
  if (split == Split::kReplicated) {
    ops::CopyInto(full, shard);
  } else if (split == Split::kRows) {
    Tensor to = full.Rows(range.begin, range.end);
    ops::CopyInto(to, shard);
  } else {
    for (int64_t i = 0; i < full.size(0); ++i) {
      Tensor to = full.Rows(i, i + 1).Flatten().Rows(range.begin, range.end);
      ops::CopyInto(to, shard.Rows(i, i + 1).Flatten());
    }
  }
}

}  // namespace tinyddp::dist::tensor_parallel
