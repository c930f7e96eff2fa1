// ColumnParallelLinear: a Linear whose output features are split over the tp group (Megatron-LM's
// ColumnParallelLinear), a piece of the tensor-parallel wing (dist/parallel/tensor/, docs/tensor_parallel.md).
//
// Rank r holds rows [begin_r, end_r) of the weight W [out, in] and the same slice of the bias (shard_range.h:
// uneven sizes allowed, the first ranks get one more). The input X is the same on every rank; rank r computes
// Y_r = X @ W_r^T + b_r, the features [begin_r, end_r) of the layer's output, whole, with no communication in
// forward. Its input goes through f (region_ops.h): in backward, dX = sum over ranks of dY_r @ W_r is the one
// all_reduce this layer costs.
//
// The output is left split: a row-parallel layer (row_parallel_linear.h) takes exactly this slice as its
// input, so the pair needs no gather in between, and an elementwise activation between them runs on each
// rank's slice alone.
//
// Like nn::Linear: parameters "weight" and "bias" (the shards: what an optimizer steps and DDP over the data-
// parallel group averages), the ReLU fused into the GEMM by ForwardRelu, and bf16 mixed precision through
// Module::SetPrecision (bfloat16 compute copies of the float32 shards; float32 gradients). Any device the
// tensor ops run on, with a group of that device (Gloo for CPU, NCCL for CUDA).
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_COLUMN_PARALLEL_LINEAR_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_COLUMN_PARALLEL_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "dist/parallel/tensor/comm.h"
#include "dist/parallel/tensor/shard_range.h"
#include "nn/module.h"

namespace tinyddp::dist::tensor_parallel {

class ColumnParallelLinear : public nn::Module {
 public:
  /// This rank's shard of the whole layer `weight` [out, in] and `bias` [out] (undefined: no bias): rows
  /// `rows` of both, copied (their dtype and device). `name` ("0") names the layer in errors, `index` (its
  /// position among the model's Linears) in a trace. Precondition: rows lies inside [0, out) and is not
  /// empty. The shard computes in float32 until SetPrecision.
  ColumnParallelLinear(const Tensor& weight, const Tensor& bias, ShardRange rows,
                       std::shared_ptr<TensorParallelComm> comm, const std::string& name, int64_t index);

  /// x [N, in] (the same on every tp rank) -> [N, rows.size()]: f(x) @ weight^T + bias. When tracing
  /// (comm.h), the GEMM is a "forward layer" span, and its input is marked for the layer's backward span
  /// (region_ops.h: f's all_reduce comes after it).
  autograd::Variable Forward(const autograd::Variable& x) override;
  /// relu(Forward(x)) as one node (ops::LinearRelu), as nn::Linear::ForwardRelu.
  autograd::Variable ForwardRelu(const autograd::Variable& x);
  /// "ColumnParallelLinear(in_features=13, out_features=7, rows [4, 7) on tp rank 1 of 2, bias=True)".
  std::string ToString() const override;

  const autograd::Variable& weight() const { return weight_; }  // [rows.size(), in]
  const autograd::Variable& bias() const { return bias_; }      // [rows.size()]; undefined without bias
  ShardRange rows() const { return rows_; }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }  // the whole layer's

 private:
  autograd::Variable Compute(const autograd::Variable& x, bool relu);

  int64_t in_features_, out_features_;
  ShardRange rows_;
  std::shared_ptr<TensorParallelComm> comm_;
  LayerLabel layer_;  // "layer 0" and its index: how errors and the trace name it (short: no allocation per step)
  autograd::Variable weight_, bias_;
};

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_COLUMN_PARALLEL_LINEAR_H_
