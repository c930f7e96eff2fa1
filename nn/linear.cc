// nn::Linear (nn/linear.h).
#include "nn/linear.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "autograd/functions.h"
#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_features_(in_features), out_features_(out_features) {
  TINYDDP_CHECK_OP(in_features > 0 && out_features > 0, "nn::Linear", "sizes must be positive, got in_features=",
                   in_features, " out_features=", out_features);
  TINYDDP_CHECK_OP(IsFloatingPoint(options.dtype), "nn::Linear", "parameters must be floating point, got ",
                   DTypeName(options.dtype));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  Tensor w = Tensor::Empty({out_features, in_features}, options.dtype, options.device);
  ops::UniformInit(w, -bound, bound, options.seed, options.rng_offset);
  weight_ = RegisterParameter("weight", w);
  if (options.bias) {
    Tensor b = Tensor::Empty({out_features}, options.dtype, options.device);
    ops::UniformInit(b, -bound, bound, options.seed, options.rng_offset + w.numel());
    bias_ = RegisterParameter("bias", b);
  }
}

Variable Linear::Forward(const Variable& x) { return Compute(x, /*relu=*/false); }

Variable Linear::ForwardRelu(const Variable& x) { return Compute(x, /*relu=*/true); }

Variable Linear::Compute(const Variable& x, bool relu) {
  if (precision() == Precision::kFloat32) {
    return relu ? autograd::LinearRelu(x, weight_, bias_) : autograd::Linear(x, weight_, bias_);
  }
  // bf16: the GEMM runs on bfloat16 operands. The input is cast where it is not bfloat16 yet, which in
  // an MLP is the first layer only (every later one receives the bfloat16 output of the one before).
  // The weights are the compute copies the optimizer step keeps current; the gradients of weight_ and
  // bias_ come back float32 (autograd::LinearValues).
  const Variable input = x.dtype() == DType::kBFloat16 ? x : autograd::Cast(x, DType::kBFloat16);
  const autograd::LinearValues values{ComputeValue(weight_), bias_.defined() ? ComputeValue(bias_) : Tensor()};
  return relu ? autograd::LinearRelu(input, weight_, bias_, values) : autograd::Linear(input, weight_, bias_, values);
}

std::string Linear::ToString() const {
  return absl::StrCat("Linear(in_features=", in_features_, ", out_features=", out_features_,
                      ", bias=", bias_.defined() ? "True" : "False", ")");
}

uint64_t Linear::NumRandomDraws(int64_t in_features, int64_t out_features, bool bias) {
  return static_cast<uint64_t>(out_features) * (in_features + (bias ? 1 : 0));
}

}  // namespace tinyddp::nn
