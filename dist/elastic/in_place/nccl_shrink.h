// ShrinkNcclCommunicator: NCCL's way to lose a rank without re-initializing, ncclCommShrink (NCCL 2.27+). The
// survivors call it on the communicator a failure left behind, excluding the lost ranks; with `abort` it
// first terminates the parent's outstanding operations (NCCL_SHRINK_ABORT: a failed collective never ends on
// its own), then builds the child from the parent's setup instead of paying ncclCommInitRank's whole
// initialization again (abort + re-init: topology, rings and trees, buffers). The parent must then be
// destroyed (ncclCommAbort) by the caller.
//
// Status: compiled in CUDA builds, behind the same seam as the Gloo path (replica_group.h would call it in
// place of building a new Gloo group), but not wired into ProcessGroupNCCL or training, and tested only where
// two GPUs are visible (nccl_shrink_test skips otherwise, saying so). --min_replicas refuses --backend=nccl.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_NCCL_SHRINK_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_NCCL_SHRINK_H_

#include <vector>

#include "absl/status/statusor.h"

typedef struct ncclComm* ncclComm_t;  // as nccl.h declares it: no NCCL header for CPU readers

namespace tinyddp::dist::in_place {

/// The communicator of `parent`'s ranks without `lost_ranks` (ranks of `parent`), each survivor's rank its
/// index among the survivors. Collective over the survivors (every survivor passes the same list).
/// Errors: Unimplemented when the NCCL this binary runs with is older than 2.27 (no ncclCommShrink);
/// Internal with NCCL's error string otherwise.
absl::StatusOr<ncclComm_t> ShrinkNcclCommunicator(ncclComm_t parent, const std::vector<int>& lost_ranks, bool abort);

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_NCCL_SHRINK_H_
