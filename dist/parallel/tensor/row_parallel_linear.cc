// RowParallelLinear (dist/parallel/tensor/row_parallel_linear.h): a partial GEMM, g, and the bias added once.
#include "dist/parallel/tensor/row_parallel_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "autograd/functions.h"
#include "autograd/node.h"
#include "base/check.h"
#include "dist/parallel/tensor/region_ops.h"
#include "tensor/ops.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

using autograd::Grads;
using autograd::NeedsGrad;
using autograd::Variable;

// The bias's gradient: the column sum of dy, in the bias's own dtype (float32 of a bfloat16 dy under bf16),
// written into the bias's .grad or gradient destination when the engine offers it (a DDP bucket view), as
// autograd/linear.cc does; then undefined, the slot holding it.
Tensor BiasGrad(const Tensor& dy, DType dtype, const NeedsGrad& needs) {
  const Tensor* add_to = needs.accumulate_into(1);
  const Tensor* slot = add_to != nullptr ? add_to : needs.write_into(1);
  if (slot != nullptr) {
    Tensor into = *slot;
    ops::SumRowsInto(into, dy, add_to != nullptr ? 1.f : 0.f);
    return Tensor();
  }
  Tensor db = Tensor::Empty({dy.size(1)}, dtype, dy.device());
  ops::SumRowsInto(db, dy);
  return db;
}

// z + bias, the bias broadcast over the rows, with `value` standing in for the bias's data (its bfloat16
// compute copy under bf16). Backward: dz passes through, and the bias gets BiasGrad.
Variable AddBias(const Variable& z, const Variable& bias, const Tensor& value) {
  Tensor y = ops::AddRowVector(z.data(), value);
  const DType dtype = bias.dtype();
  return autograd::Record("AddReplicatedBias", std::move(y), {z, bias},
                          [dtype](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                            Grads grads(2);
                            if (needs[0]) grads[0] = dy;
                            if (needs[1]) grads[1] = BiasGrad(dy, dtype, needs);
                            return grads;
                          });
}

}  // namespace

RowParallelLinear::RowParallelLinear(const Tensor& weight, const Tensor& bias, ShardRange columns,
                                     std::shared_ptr<TensorParallelComm> comm, const std::string& name,
                                     int64_t index)
    : in_features_(weight.size(1)),
      out_features_(weight.size(0)),
      columns_(columns),
      comm_(std::move(comm)),
      layer_{absl::StrCat("layer ", name), index} {
  TINYDDP_CHECK_OP(weight.dim() == 2 && (!bias.defined() || bias.shape() == Shape{out_features_}), "RowParallelLinear",
                   "the layer's weight must be [out, in] and its bias [out], got ", ShapeToString(weight.shape()),
                   " and ", bias.defined() ? ShapeToString(bias.shape()) : "none");
  TINYDDP_CHECK_OP(columns.begin >= 0 && columns.end <= in_features_ && columns.size() > 0, "RowParallelLinear",
                   "columns ", columns.ToString(), " are not a non-empty part of the layer's ", in_features_,
                   " inputs");
  weight_ = RegisterParameter("weight", SliceShard(weight, Split::kColumns, columns));
  if (bias.defined()) bias_ = RegisterParameter("bias", bias.Clone());
}

Variable RowParallelLinear::Forward(const Variable& x) {
  const bool bf16 = precision() == nn::Precision::kBFloat16;
  Tracer* const tracer = comm_->tracer();  // tracing: the GEMM and the bias are the layer's compute, g is not
  const Variable input = MarkLayerInput(x, comm_);
  // 1. This rank's term of the sum: x_r @ W_r^T, no bias (nn::Linear's op, so W_r's gradient is its GEMM).
  Variable partial;
  {
    Tracer::Span span = Tracer::MaybeScope(tracer, "forward layer", layer_.index);
    if (!bf16) {
      partial = autograd::Linear(input, weight_, Variable());
    } else {
      const Variable cast = input.dtype() == DType::kBFloat16 ? input : autograd::Cast(input, DType::kBFloat16);
      partial = autograd::Linear(cast, weight_, Variable(), autograd::LinearValues{ComputeValue(weight_), Tensor()});
    }
  }
  // 2. g: the sum over the tp ranks, the same bits on every rank.
  const Variable sum = ReduceFromTensorParallelRegion(partial, comm_, layer_);
  // 3. The bias, once.
  if (!bias_.defined()) return sum;
  Tracer::Span span = Tracer::MaybeScope(tracer, "forward layer", layer_.index);
  return AddBias(sum, bias_, bf16 ? ComputeValue(bias_) : bias_.data());
}

std::string RowParallelLinear::ToString() const {
  return absl::StrCat("RowParallelLinear(in_features=", in_features_, ", out_features=", out_features_, ", columns ",
                      columns_.ToString(), " on tp rank ", comm_->rank(), " of ", comm_->size(),
                      ", bias=", bias_.defined() ? "True" : "False", ")");
}

}  // namespace tinyddp::dist::tensor_parallel
