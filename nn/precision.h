// Precision: how a model computes, the policy behind `--precision=fp32|bf16` (PyTorch's autocast and
// FSDP's MixedPrecision, reduced to one choice). Sits in nn/ beside Module, which carries it.
//
// kFloat32   everything in float32, as before: the parameters are what the layers compute with.
// kBFloat16  mixed precision. What runs in bfloat16 and what stays float32, and why:
//
//   float32   the parameters (autograd leaves: their names, shapes, gradients, DDP's buckets and the
//             checkpoints are those of the float32 model), the gradients (each weight gradient's GEMM
//             accumulates in float32 and writes float32 straight into .grad or its DDP bucket view; no
//             cast pass), the optimizer state (momentum, Adam's moments), the loss (and its softmax),
//             and so the all_reduce of the gradients, which adds float32.
//   bfloat16  what the layers compute with: each float32 parameter has a bfloat16 compute copy, the
//             input is cast once at the first Linear, activations flow in bfloat16, every GEMM runs on
//             the tensor cores (accumulating in float32, rounding once as it stores).
//
// The compute copies are written by the optimizer step itself (ops::SgdStep / ops::AdamStep with
// bf16_copies: the pass that writes the new float32 weight also stores it rounded to bfloat16), so a
// step has no separate cast pass. They are cast from the parameters once when the policy is set, and
// again when the parameters change otherwise (Module::RefreshComputeCopies: a checkpoint load does it,
// DDP's broadcast of rank 0's weights needs it). docs/mixed_precision.md tells the whole story.
#ifndef TINYDDP_NN_PRECISION_H_
#define TINYDDP_NN_PRECISION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/dtype.h"

namespace tinyddp::nn {

enum class Precision { kFloat32, kBFloat16 };

/// "fp32" or "bf16" (the flag values).
const char* PrecisionName(Precision precision);
/// Parses "fp32" or "bf16"; anything else is InvalidArgument naming the choices.
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
/// The dtype layers compute in: float32 or bfloat16.
DType ComputeDType(Precision precision);

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_PRECISION_H_
