// MLP(dims, activation): the model every tinyddp example and benchmark trains. Builds
// Sequential(Linear(d0, d1), act, Linear(d1, d2), act, ..., Linear(d[n-2], d[n-1])), the same module
// tree as torch.nn.Sequential of the same layers, so parameter names (0.weight, 0.bias, 2.weight, ...)
// and checkpoints match PyTorch's.
#ifndef TINYDDP_NN_MLP_H_
#define TINYDDP_NN_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/activation.h"
#include "nn/precision.h"
#include "nn/sequential.h"

namespace tinyddp::nn {

struct MlpOptions {
  Activation activation = Activation::kReLU;
  bool bias = true;
  DType dtype = DType::kFloat32;
  Device device = Device::CPU();
  /// All layers draw their init from one Philox stream with this key, one counter range per layer, so
  /// the whole model is a function of the seed: identical on CPU and GPU and on every rank.
  uint64_t seed = 0;
  /// How the model computes (nn/precision.h): bf16 keeps float32 parameters and gives them bfloat16
  /// compute copies (Module::SetPrecision). Needs dtype float32.
  Precision precision = Precision::kFloat32;
};

/// Preconditions: at least two dims (input and output), all positive.
std::shared_ptr<Sequential> MLP(const std::vector<int64_t>& dims, const MlpOptions& options = {});

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_MLP_H_
