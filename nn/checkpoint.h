// Checkpoints of modules and optimizers as safetensors files (nn/safetensors.h). Module files use
// PyTorch's state_dict names and layouts ("0.weight" is [out, in]), so
//   torch.nn.Sequential(...).load_state_dict(safetensors.torch.load_file(path), strict=True)
// loads a file written here, and a file written by safetensors.torch.save_file(model.state_dict())
// loads here.
#ifndef TINYDDP_NN_CHECKPOINT_H_
#define TINYDDP_NN_CHECKPOINT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/tensor_map.h"

namespace tinyddp::nn {

/// name -> parameter data, as a TensorMap.
TensorMap StateDictOf(const Module& module);

/// Checks `state` against module like load_state_dict(strict=True) and copies it into the existing
/// parameter tensors (on their device, so Variables, gradient views and optimizers stay valid), then
/// casts the compute copies of a bf16 module from them (Module::RefreshComputeCopies). The file holds
/// the float32 master weights whatever the precision, so it loads into either.
/// InvalidArgument, naming `source`, the missing and unexpected names or the first shape/dtype
/// mismatch; the module is unchanged unless everything matches.
absl::Status LoadStateDict(Module& module, const TensorMap& state, absl::string_view source = "<state>");

/// Writes module's state_dict to `path` (atomically), with metadata {"format": "pt"} plus `metadata`.
absl::Status SaveModule(const Module& module, const std::string& path, const StringMap& metadata = {});
/// Reads `path` and loads it into `module` strictly (LoadSafetensors, then LoadStateDict).
absl::Status LoadModule(Module& module, const std::string& path);

/// The optimizer's StateTensors() to `path`, and back (with the optimizer's own validation).
absl::Status SaveOptimizer(const Optimizer& optimizer, const std::string& path, const StringMap& metadata = {});
absl::Status LoadOptimizer(Optimizer& optimizer, const std::string& path);

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_CHECKPOINT_H_
