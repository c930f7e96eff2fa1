// nn::Linear: y = x @ weight^T + bias, with PyTorch's parameter layout and default initialisation, so a
// checkpoint loads into torch.nn.Linear unchanged. The math lives in autograd::Linear.
// Under bf16 mixed precision (Module::SetPrecision, nn/precision.h) the layer computes in bfloat16 with
// its parameters' compute copies, casting a float32 input once, and its weight and bias gradients land
// in float32 in the parameters' .grad, as the float32 layer's do.
#ifndef TINYDDP_NN_LINEAR_H_
#define TINYDDP_NN_LINEAR_H_

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace tinyddp::nn {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::kFloat32;
  /// Where the parameters are created (and initialised: no host->device copy).
  Device device = Device::CPU();
  /// The init draws Philox numbers (ops::UniformInit) with key `seed` at counters rng_offset,
  /// rng_offset + 1, ...: weight first (out*in numbers), then bias (out). Same seed and offset give the
  /// same parameters on every device and every rank.
  uint64_t seed = 0;
  uint64_t rng_offset = 0;
};

class Linear : public Module {
 public:
  /// weight [out_features, in_features] and bias [out_features], both U(-1/sqrt(in), 1/sqrt(in)) as
  /// PyTorch's reset_parameters (kaiming_uniform_ with a=sqrt(5) reduces to that bound for the weight).
  /// Preconditions: in_features > 0, out_features > 0, a floating-point dtype.
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});

  /// x [N, in_features] -> [N, out_features]. Under bf16 the output is bfloat16, whatever x's dtype.
  Variable Forward(const Variable& x) override;
  /// relu(Forward(x)) as one node: the bias and the ReLU are fused into the GEMM (ops::LinearRelu), so
  /// the pre-activation never goes to memory. Sequential uses it for a Linear followed by a ReLU.
  Variable ForwardRelu(const Variable& x);
  std::string ToString() const override;

  const Variable& weight() const { return weight_; }
  /// Undefined when built with bias = false.
  const Variable& bias() const { return bias_; }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  /// Philox counters the init of such a layer consumes (the next layer's rng_offset starts after them).
  static uint64_t NumRandomDraws(int64_t in_features, int64_t out_features, bool bias);

 private:
  Variable Compute(const Variable& x, bool relu);

  int64_t in_features_, out_features_;
  Variable weight_, bias_;
};

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_LINEAR_H_
