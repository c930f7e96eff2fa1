// TensorParallelPlan: how an MLP is cut for tensor parallelism, decided before anything is built or sent,
// a piece of the tensor-parallel wing (dist/parallel/tensor/, docs/tensor_parallel.md). A pure function of
// the model's shape and the tp size, so rank 0 can print it and every rank derives the same one.
//
// The rule (Megatron-LM's MLP block): the Linear layers, in order, are taken two by two. The first of a pair
// becomes column-parallel (its output features split), the second row-parallel (its input features split the
// same way), and the activation between them runs on each rank's slice: one all_reduce per pair in forward
// (after the row layer) and one in backward (before the column layer). With an odd number of Linear layers
// the last one has no partner and stays replicated: every tp rank holds it whole and computes it on the same
// input (the pair before it ends in an all_reduce, whose result is the same bits on every rank), so its
// gradient is the same on every tp rank too, and it needs no communication of its own. (Splitting it alone
// would cost an all_reduce or an all_gather of its own for each direction, for one small layer: the logits.)
//
// Each parameter's split (shard_range.h): column layer weight and bias by rows; row layer weight by columns,
// its bias replicated; a replicated layer's both whole. The plan lists them in the model's NamedParameters()
// order, which is also TensorParallelMlp's: checkpoints and optimizer state map one to one.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_MLP_PLAN_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_MLP_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/parallel/tensor/shard_range.h"
#include "nn/sequential.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::tensor_parallel {

enum class LayerRole { kColumn, kRow, kReplicated };
/// "column", "row", "replicated".
const char* RoleName(LayerRole role);

/// One nn::Linear of the model and what it becomes.
struct PlannedLinear {
  size_t child = 0;  // its position in the Sequential
  std::string name;  // the Sequential's name for it: "0", "2", ...
  LayerRole role = LayerRole::kReplicated;
  int64_t in = 0, out = 0;
  bool bias = true;
};

/// One parameter of the whole model: its one-process name and shape, and how it is split.
struct PlannedParam {
  std::string name;  // "0.weight"
  Shape full_shape;
  Split split = Split::kReplicated;
};

struct TensorParallelPlan {
  int tp = 1;
  DType activation_dtype = DType::kFloat32;  // float32, or bfloat16 under bf16 mixed precision
  DType parameter_dtype = DType::kFloat32;   // the parameters' (and so their gradients') dtype
  std::vector<PlannedLinear> linears;
  std::vector<PlannedParam> params;  // in NamedParameters() order

  /// The plan for `full` over `tp` ranks. InvalidArgument (saying what to change) unless tp >= 1 and
  /// `full` is an MLP as nn::MLP builds it: Linear layers with one elementwise activation (nn::ReLU,
  /// nn::GELU) between each two, nothing else; or when a pair's hidden features are fewer than tp (a rank
  /// would hold nothing of that layer).
  static absl::StatusOr<TensorParallelPlan> Make(const nn::Sequential& full, int tp);

  /// Rank `rank`'s range of the dimension param's split cuts (empty for a replicated parameter).
  ShardRange RangeOf(const PlannedParam& param, int rank) const;
  /// Elements of the parameters tp rank `rank` holds.
  int64_t LocalParameters(int rank) const;
  int64_t TotalParameters() const;

  /// A short table for rank 0 to print: each Linear, its role, its weight and bias shards on every tp rank,
  /// the bytes each pair all-reduces per step for `batch_size` rows (per data-parallel replica; 0 leaves the
  /// bytes out) in forward and in backward, and the gradient bytes DDP over the data-parallel group would
  /// all-reduce for tp rank 0's shards instead.
  std::string Describe(int64_t batch_size) const;
};

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_MLP_PLAN_H_
