// The MLP builder (nn/mlp.h).
#include "nn/mlp.h"

#include "absl/strings/str_join.h"
#include "nn/linear.h"
#include "base/check.h"

namespace tinyddp::nn {

std::shared_ptr<Sequential> MLP(const std::vector<int64_t>& dims, const MlpOptions& options) {
  TINYDDP_CHECK_OP(dims.size() >= 2, "nn::MLP", "needs at least an input and an output size, got [",
                   absl::StrJoin(dims, ", "), "]");
  auto model = std::make_shared<Sequential>();
  uint64_t rng_offset = 0;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    LinearOptions linear;
    linear.bias = options.bias;
    linear.dtype = options.dtype;
    linear.device = options.device;
    linear.seed = options.seed;
    linear.rng_offset = rng_offset;
    rng_offset += Linear::NumRandomDraws(dims[i], dims[i + 1], options.bias);
    model->Append(std::make_shared<Linear>(dims[i], dims[i + 1], linear));
    if (i + 2 < dims.size()) model->Append(MakeActivation(options.activation));
  }
  if (options.precision != Precision::kFloat32) model->SetPrecision(options.precision);
  return model;
}

}  // namespace tinyddp::nn
