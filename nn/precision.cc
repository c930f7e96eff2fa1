// Precision (nn/precision.h): names and parsing.
#include "nn/precision.h"

#include "absl/strings/str_cat.h"

namespace tinyddp::nn {

const char* PrecisionName(Precision precision) { return precision == Precision::kBFloat16 ? "bf16" : "fp32"; }

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  if (name == "fp32") return Precision::kFloat32;
  if (name == "bf16") return Precision::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat("unknown precision '", name,
                                                 "'; expected fp32 (everything float32) or bf16 (bfloat16 compute, "
                                                 "float32 master weights, gradients and optimizer state)"));
}

DType ComputeDType(Precision precision) {
  return precision == Precision::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
}

}  // namespace tinyddp::nn
