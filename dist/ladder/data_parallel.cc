// The ladder's shared start (dist/ladder/data_parallel.h).
#include "dist/ladder/data_parallel.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "autograd/grad_mode.h"
#include "base/status_macros.h"
#include "dist/ddp/ddp.h"

namespace tinyddp::dist::ladder {

absl::Status StartFromRankZero(ProcessGroup& pg,
                               const std::vector<std::pair<std::string, autograd::Variable>>& params) {
  RETURN_IF_ERROR(VerifyParametersMatchAcrossRanks(pg, params));
  autograd::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;  // issue every broadcast, then wait: they pipeline
  for (const auto& [name, p] : params) works.push_back(pg.Broadcast(p.data(), /*root=*/0));
  for (size_t i = 0; i < works.size(); ++i) {
    if (absl::Status s = works[i]->Wait(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("broadcasting parameter '", params[i].first,
                                                 "' from rank 0 failed: ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<autograd::Variable> TrainableParameters(
    const std::vector<std::pair<std::string, autograd::Variable>>& params) {
  std::vector<autograd::Variable> out;
  for (const auto& [name, p] : params) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

}  // namespace tinyddp::dist::ladder
