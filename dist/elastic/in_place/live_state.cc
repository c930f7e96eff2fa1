// AdoptLiveState: see live_state.h.
#include "dist/elastic/in_place/live_state.h"

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/grad_mode.h"
#include "base/status_macros.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::in_place {
namespace {

// "name dtype d0,d1;name dtype;..." (a scalar has no dimensions).
std::string Manifest(const nn::TensorMap& state) {
  std::vector<std::string> entries;
  for (const auto& [name, tensor] : state) {
    entries.push_back(absl::StrCat(name, " ", static_cast<int>(tensor.dtype()), " ",
                                   absl::StrJoin(tensor.shape(), ",")));
  }
  return absl::StrJoin(entries, ";");
}

absl::StatusOr<nn::TensorMap> EmptyFromManifest(const std::string& manifest, Device device) {
  nn::TensorMap state;
  for (absl::string_view entry : absl::StrSplit(manifest, ';', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(entry, ' ');
    int dtype = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &dtype)) {
      return absl::DataLossError(absl::StrCat("in-place recovery: a bad optimizer-state manifest entry \"", entry, "\""));
    }
    Shape shape;
    for (absl::string_view dim : absl::StrSplit(parts[2], ',', absl::SkipEmpty())) {
      int64_t size = 0;
      if (!absl::SimpleAtoi(dim, &size)) return absl::DataLossError("in-place recovery: a bad shape in the manifest");
      shape.push_back(size);
    }
    state[parts[0]] = Tensor::Zeros(shape, static_cast<DType>(dtype), device);
  }
  return state;
}

}  // namespace

absl::Status AdoptLiveState(ReplicaGroup& replicas, nn::Module& model, nn::Optimizer& optimizer,
                            std::vector<int64_t>& progress) {
  ProcessGroup& group = *replicas.group();
  const int root = replicas.membership().IndexOf(replicas.membership().source);
  const bool source = group.rank() == root;
  std::shared_ptr<Store> store = replicas.generation_store();
  nn::TensorMap state = optimizer.StateTensors();
  if (source) {
    const std::string manifest = Manifest(state);
    RETURN_IF_ERROR(store->Set("state/manifest", Bytes(manifest.begin(), manifest.end())));
  } else {
    ASSIGN_OR_RETURN(const Bytes manifest, store->Get("state/manifest"));
    const Device device = model.Parameters().empty() ? Device::CPU() : model.Parameters()[0].data().device();
    ASSIGN_OR_RETURN(state, EmptyFromManifest(std::string(manifest.begin(), manifest.end()), device));
  }
  autograd::NoGradGuard no_grad;
  Tensor counters = Tensor::FromVector<int64_t>(progress, {static_cast<int64_t>(progress.size())});
  std::vector<std::shared_ptr<Work>> works = {group.Broadcast(counters, root)};
  for (const auto& [name, tensor] : model.StateDict()) works.push_back(group.Broadcast(tensor, root));
  for (const auto& [name, tensor] : state) works.push_back(group.Broadcast(tensor, root));
  for (const auto& work : works) RETURN_IF_ERROR(work->Wait());
  progress = counters.ToVector<int64_t>();
  model.RefreshComputeCopies();
  if (!source) RETURN_IF_ERROR(optimizer.LoadStateTensors(state));
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::in_place
