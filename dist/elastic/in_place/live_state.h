// AdoptLiveState: after a recovery, every member takes the training state of one member, the membership's
// source, over the new group: the weights, the optimizer's state (momentum, Adam's moments and step) and the
// progress (step, epoch, sample cursor). No checkpoint is read. torchft's live recovery from a peer; here it
// also covers the case quorum.h describes (some survivors had completed the failed step, the others adopt
// their state), and a member that already holds the same state receives the same bytes (nothing changes).
//
// The optimizer's state is named and shaped only on the source (a parameter not stepped yet has no entry),
// so the source writes a manifest of names, dtypes and shapes into the generation's store first; then one
// broadcast per tensor, all issued before any is waited for.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_LIVE_STATE_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_LIVE_STATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "dist/elastic/in_place/replica_group.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace tinyddp::dist::in_place {

/// Collective over replicas.group(): `model`, `optimizer` and `progress` (a few integers, the same count on
/// every member) become the source's. Errors: the group's (a member failed: shrink again) or the store's.
absl::Status AdoptLiveState(ReplicaGroup& replicas, nn::Module& model, nn::Optimizer& optimizer,
                            std::vector<int64_t>& progress);

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_LIVE_STATE_H_
