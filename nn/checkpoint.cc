// Module and optimizer checkpoints (nn/checkpoint.h).
#include "nn/checkpoint.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"

namespace tinyddp::nn {

TensorMap StateDictOf(const Module& module) {
  TensorMap state;
  for (auto& [name, t] : module.StateDict()) state[name] = t;
  return state;
}

absl::Status LoadStateDict(Module& module, const TensorMap& state, absl::string_view source) {
  const auto params = module.NamedParameters();
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, p] : params) {
    if (state.count(name) == 0) missing.push_back(name);
  }
  for (const auto& [name, t] : state) {
    bool known = false;
    for (const auto& [pname, p] : params) known = known || pname == name;
    if (!known) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loading ", source, " into the module: missing keys [", absl::StrJoin(missing, ", "), "], unexpected keys [",
        absl::StrJoin(unexpected, ", "), "] (the names must match the module's NamedParameters() exactly)"));
  }
  for (const auto& [name, p] : params) {
    const Tensor& t = state.at(name);
    if (t.shape() != p.shape() || t.dtype() != p.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("loading ", source, " into the module: '", name, "' is ",
                                                     DTypeName(t.dtype()), " ", ShapeToString(t.shape()),
                                                     " in the file but ", DTypeName(p.dtype()), " ",
                                                     ShapeToString(p.shape()), " in the module"));
    }
  }
  for (const auto& [name, p] : params) {
    Tensor dst = p.data();
    ops::CopyInto(dst, state.at(name));
  }
  module.RefreshComputeCopies();  // bf16 precision: the compute copies follow the loaded float32 weights
  return absl::OkStatus();
}

absl::Status SaveModule(const Module& module, const std::string& path, const StringMap& metadata) {
  StringMap all = metadata;
  all.emplace("format", "pt");  // what transformers writes for PyTorch state_dicts
  return SaveSafetensors(path, StateDictOf(module), all);
}

absl::Status LoadModule(Module& module, const std::string& path) {
  absl::StatusOr<SafetensorsContents> contents = LoadSafetensors(path);
  RETURN_IF_ERROR(contents);
  return LoadStateDict(module, contents->tensors, path);
}

absl::Status SaveOptimizer(const Optimizer& optimizer, const std::string& path, const StringMap& metadata) {
  return SaveSafetensors(path, optimizer.StateTensors(), metadata);
}

absl::Status LoadOptimizer(Optimizer& optimizer, const std::string& path) {
  absl::StatusOr<SafetensorsContents> contents = LoadSafetensors(path);
  RETURN_IF_ERROR(contents);
  absl::Status status = optimizer.LoadStateTensors(contents->tensors);
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  return status;
}

}  // namespace tinyddp::nn
