// RowParallelLinear: a Linear whose input features are split over the tp group (Megatron-LM's
// RowParallelLinear), a piece of the tensor-parallel wing (dist/parallel/tensor/, docs/tensor_parallel.md).
//
// Rank r holds columns [begin_r, end_r) of the weight W [out, in], the same columns a column-parallel layer
// before it gave rank r as outputs, so its input X_r [N, end_r - begin_r] is exactly what that layer left on
// this rank. X @ W^T = sum over r of X_r @ W_r^T: each rank computes one term, a partial sum of every output
// feature, and g (region_ops.h) all-reduces them: the one all_reduce of this layer, in forward.
//
// The bias is replicated, whole on every rank, and added once, after the all_reduce: added to each partial
// sum it would be counted tp times. Its gradient is the column sum of dZ, which every rank has whole, so it
// is the same on every tp rank with no communication (as is the output Z and everything after it).
//
// Like nn::Linear: parameters "weight" (the shard) and "bias" (whole), bf16 mixed precision through
// Module::SetPrecision (the partial sums, the all_reduce and the output in bfloat16, as the activations; the
// float32 gradients of the float32 parameters), any device with a group of that device.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_ROW_PARALLEL_LINEAR_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_ROW_PARALLEL_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "dist/parallel/tensor/comm.h"
#include "dist/parallel/tensor/shard_range.h"
#include "nn/module.h"

namespace tinyddp::dist::tensor_parallel {

class RowParallelLinear : public nn::Module {
 public:
  /// This rank's shard of the whole layer `weight` [out, in] and `bias` [out] (undefined: no bias): columns
  /// `columns` of the weight and the whole bias, copied (their dtype and device). `name` ("2") names the
  /// layer in errors, `index` (its position among the model's Linears) in a trace. Precondition: columns
  /// lies inside [0, in) and is not empty.
  RowParallelLinear(const Tensor& weight, const Tensor& bias, ShardRange columns,
                    std::shared_ptr<TensorParallelComm> comm, const std::string& name, int64_t index);

  /// x [N, columns.size()] (this rank's slice of the input features) -> [N, out], the same on every tp
  /// rank: g(x @ weight^T) + bias. Collective: every tp rank calls it, also under NoGradGuard. When tracing
  /// (comm.h), the GEMM and the bias are "forward layer" spans, g's all_reduce between them is not.
  autograd::Variable Forward(const autograd::Variable& x) override;
  /// "RowParallelLinear(in_features=7, out_features=5, columns [0, 4) on tp rank 0 of 2, bias=True)".
  std::string ToString() const override;

  const autograd::Variable& weight() const { return weight_; }  // [out, columns.size()]
  const autograd::Variable& bias() const { return bias_; }      // [out], whole; undefined without bias
  ShardRange columns() const { return columns_; }
  int64_t in_features() const { return in_features_; }  // the whole layer's
  int64_t out_features() const { return out_features_; }

 private:
  int64_t in_features_, out_features_;
  ShardRange columns_;
  std::shared_ptr<TensorParallelComm> comm_;
  LayerLabel layer_;  // "layer 2" and its index: how errors and the trace name it (short: no allocation per step)
  autograd::Variable weight_, bias_;
};

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_ROW_PARALLEL_LINEAR_H_
