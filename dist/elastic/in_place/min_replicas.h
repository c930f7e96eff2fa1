// CheckMinReplicas: which jobs --min_replicas can keep going, checked before any worker starts.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_MIN_REPLICAS_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_MIN_REPLICAS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tinyddp::dist::in_place {

struct MinReplicasRequest {
  int64_t min_replicas = 0;  // 0: off
  int64_t replicas = 0;      // data-parallel replicas the job starts with (0: not known yet)
  std::string backend;       // "gloo" or "nccl" (after auto resolved)
  int64_t tp = 1, pp = 1, zero = 0;
  int64_t microbatches = 0;  // > 0: the pipeline path (at --pp=1 too)
  bool join = false, cuda_graph = false;
  int64_t grad_accum_steps = 1;
  std::string ddp = "full";
};

/// OK when off, or when the job is one in-place recovery supports; InvalidArgument naming the flag, why and
/// what to do otherwise.
absl::Status CheckMinReplicas(const MinReplicasRequest& request);

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_MIN_REPLICAS_H_
