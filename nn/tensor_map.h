// Named collections of tensors and strings, sorted by name: what checkpoints, state_dicts and optimizer
// state are made of (nn/safetensors.h, nn/checkpoint.h, nn/optimizer.h).
#ifndef TINYDDP_NN_TENSOR_MAP_H_
#define TINYDDP_NN_TENSOR_MAP_H_

#include <map>
#include <string>

#include "tensor/tensor.h"

namespace tinyddp::nn {

using TensorMap = std::map<std::string, Tensor>;
using StringMap = std::map<std::string, std::string>;

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_TENSOR_MAP_H_
