// ShrinkNcclCommunicator: see nccl_shrink.h.
#include "dist/elastic/in_place/nccl_shrink.h"

#include <nccl.h>

#include "absl/strings/str_cat.h"

namespace tinyddp::dist::in_place {

absl::StatusOr<ncclComm_t> ShrinkNcclCommunicator(ncclComm_t parent, const std::vector<int>& lost_ranks, bool abort) {
#if NCCL_VERSION_CODE >= 22700
  int version = 0;
  ncclGetVersion(&version);
  if (version < 22700) {
    return absl::UnimplementedError(absl::StrCat("ncclCommShrink needs NCCL 2.27 or later; this process runs NCCL ",
                                                 version, " (built against ", NCCL_VERSION_CODE, ")"));
  }
  std::vector<int> excluded = lost_ranks;
  ncclComm_t child = nullptr;
  const ncclResult_t result = ncclCommShrink(parent, excluded.data(), static_cast<int>(excluded.size()), &child,
                                             /*config=*/nullptr, abort ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT);
  if (result != ncclSuccess) {
    return absl::InternalError(absl::StrCat("ncclCommShrink excluding ", excluded.size(), " rank(s) failed: ",
                                            ncclGetErrorString(result), " (", ncclGetLastError(parent), ")"));
  }
  return child;
#else
  return absl::UnimplementedError(absl::StrCat("ncclCommShrink needs NCCL 2.27 or later; this binary was built "
                                               "against NCCL ", NCCL_VERSION_CODE));
#endif
}

}  // namespace tinyddp::dist::in_place
