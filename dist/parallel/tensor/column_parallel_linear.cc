// ColumnParallelLinear (dist/parallel/tensor/column_parallel_linear.h): f, then nn::Linear's computation on
// this rank's rows.
#include "dist/parallel/tensor/column_parallel_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "autograd/functions.h"
#include "base/check.h"
#include "dist/parallel/tensor/region_ops.h"

namespace tinyddp::dist::tensor_parallel {

using autograd::Variable;

ColumnParallelLinear::ColumnParallelLinear(const Tensor& weight, const Tensor& bias, ShardRange rows,
                                           std::shared_ptr<TensorParallelComm> comm, const std::string& name,
                                           int64_t index)
    : in_features_(weight.size(1)),
      out_features_(weight.size(0)),
      rows_(rows),
      comm_(std::move(comm)),
      layer_{absl::StrCat("layer ", name), index} {
  TINYDDP_CHECK_OP(weight.dim() == 2 && (!bias.defined() || bias.shape() == Shape{out_features_}),
                   "ColumnParallelLinear", "the layer's weight must be [out, in] and its bias [out], got ",
                   ShapeToString(weight.shape()), " and ", bias.defined() ? ShapeToString(bias.shape()) : "none");
  TINYDDP_CHECK_OP(rows.begin >= 0 && rows.end <= out_features_ && rows.size() > 0, "ColumnParallelLinear", "rows ",
                   rows.ToString(), " are not a non-empty part of the layer's ", out_features_, " outputs");
  weight_ = RegisterParameter("weight", SliceShard(weight, Split::kRows, rows));
  if (bias.defined()) bias_ = RegisterParameter("bias", SliceShard(bias, Split::kRows, rows));
}

Variable ColumnParallelLinear::Forward(const Variable& x) { return Compute(x, /*relu=*/false); }

Variable ColumnParallelLinear::ForwardRelu(const Variable& x) { return Compute(x, /*relu=*/true); }

Variable ColumnParallelLinear::Compute(const Variable& x, bool relu) {
  // Tracing: the backward span of this layer ends before f's all_reduce (region_ops.h).
  const Variable input = MarkLayerInput(CopyToTensorParallelRegion(x, comm_, layer_), comm_);
  Tracer::Span span = Tracer::MaybeScope(comm_->tracer(), "forward layer", layer_.index);
  if (precision() == nn::Precision::kFloat32) {
    return relu ? autograd::LinearRelu(input, weight_, bias_) : autograd::Linear(input, weight_, bias_);
  }
  // bf16, as nn::Linear: bfloat16 operands (the compute copies), float32 gradients for the float32 shards.
  const Variable cast = input.dtype() == DType::kBFloat16 ? input : autograd::Cast(input, DType::kBFloat16);
  const autograd::LinearValues values{ComputeValue(weight_), bias_.defined() ? ComputeValue(bias_) : Tensor()};
  return relu ? autograd::LinearRelu(cast, weight_, bias_, values) : autograd::Linear(cast, weight_, bias_, values);
}

std::string ColumnParallelLinear::ToString() const {
  return absl::StrCat("ColumnParallelLinear(in_features=", in_features_, ", out_features=", out_features_, ", rows ",
                      rows_.ToString(), " on tp rank ", comm_->rank(), " of ", comm_->size(),
                      ", bias=", bias_.defined() ? "True" : "False", ")");
}

}  // namespace tinyddp::dist::tensor_parallel
