// ReplicaGroup: the data-parallel group of an in-place recovering job, and how it shrinks. It starts as the
// world group of InitProcessGroup; when a step's collective fails (a peer died, or froze past --timeout),
// Shrink drops the group (closing its connections, which wakes the peers still waiting on this rank: the
// abort), agrees on the survivors (quorum.h) and builds a new Gloo group of exactly them under keys of the
// new generation ("g<g>/" in the job's store). Each replica keeps its id, the rank the job started it with;
// its rank in the group is its index among the members.
//
// Shrinking a Gloo group is building a new one: Gloo has no communicator to shrink; its cost is one
// rendezvous over the store (a full mesh of TCP connections among the survivors), no re-launch, no
// checkpoint. NCCL's equivalent is ncclCommShrink (nccl_shrink.h).
//
// A member that dies while the new group forms (a loss during the recovery) makes that group's rendezvous
// time out (--timeout); Shrink then starts the next generation without it, as often as it takes, while at
// least min_replicas remain. A replica left out is fenced: the source of the decision SIGKILLs it when it
// runs on the same host (its pid is in the store), so a frozen replica cannot wake up later and write; on
// another host its own launcher's lifeline ends it when the job ends.
//
// A replacement (started by the launcher within --max_restarts, keep_going.h) joins at a step boundary: it asks
// through the store, the lead announces the growth two steps ahead, and at that boundary every member and the
// replacement form the next generation's group, in which the replacement adopts the live state (rejoin.cc).
//
// The quorum's wait for the survivors ends early when every member that has not arrived is known to be gone:
// a process of this host that no longer exists (a SIGKILL) can never arrive. Elsewhere the window runs out.
//
// Not thread-safe: the training loop's thread only.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_REPLICA_GROUP_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_REPLICA_GROUP_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "dist/elastic/in_place/quorum.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"

namespace tinyddp::dist::in_place {

struct ReplicaGroupOptions {
  int min_replicas = 1;  // fewer members than this after a loss: Shrink fails (the job ends)
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // each new group's rendezvous and collectives
  std::chrono::milliseconds window = std::chrono::seconds(2);     // the quorum's wait for the survivors
};

class ReplicaGroup {
 public:
  /// Collective over `world`: records this process's pid for fencing. Precondition: a Gloo group with a store
  /// (InitProcessGroup's).
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Create(std::shared_ptr<ProcessGroup> world,
                                                              ReplicaGroupOptions options);

  /// The current group (the world until the first loss).
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  const Membership& membership() const { return membership_; }
  int id() const { return id_; }
  int rank() const { return membership_.IndexOf(id_); }
  /// The store of the current generation ("g<g>/"), for what the members exchange besides tensors.
  std::shared_ptr<Store> generation_store() const;

  /// After a collective of the current group failed: drops it, agrees on the survivors and `next_step`'s
  /// successor (quorum.h), builds their group, fences those left out. The caller must have released
  /// everything that holds the old group (DDP) first. Errors: FailedPrecondition when fewer than
  /// min_replicas remain or this replica was excluded; the store's errors.
  absl::StatusOr<Membership> Shrink(int64_t next_step);

  // --- Rejoin (rejoin.cc): a replacement joins at a step boundary --------------------------------------

  /// In a replacement process (the launcher started it for a lost replica `id`): asks to join through the
  /// job's in-place store `store` and waits until the members have taken it in; then this is a member with an
  /// empty state (AdoptLiveState gives it the source's). Errors: the store's (its timeout bounds the wait).
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Join(std::shared_ptr<Store> store, int id,
                                                            ReplicaGroupOptions options);
  /// The lead, at the boundary before step `step`: replacements that asked to join are announced to grow
  /// the group at step + 2 (every member reaches that boundary after this write: none can finish step + 1
  /// without the lead, which wrote first). Others: nothing.
  absl::Status AnnounceJoiners(int64_t step);
  /// Every member, at the boundary before step `step`: whether the group grows here (one store lookup
  /// until an announcement is seen).
  absl::StatusOr<bool> GrowthDue(int64_t step);
  /// The group grows by the announced replacements (the caller released DDP first): their generation's
  /// decision, written by the lead, and its group. Errors as Shrink's.
  absl::StatusOr<Membership> Grow(int64_t next_step);

 private:
  ReplicaGroup(std::shared_ptr<ProcessGroup> world, std::shared_ptr<Store> store, ReplicaGroupOptions options);
  ReplicaGroup(std::shared_ptr<Store> store, int id, ReplicaGroupOptions options);
  // From a decision to a group: fences those of `previous` left out, builds the group; if a member fails
  // while it forms, agrees again (the next generation) without it, as often as it takes.
  absl::StatusOr<Membership> Form(Membership decided, std::vector<int> previous, int64_t next_step);
  void Fence(const std::vector<int>& left_out);
  // Whether replica `id`'s process is known to be gone: it ran on this host (its "pid/<id>") and the kernel has
  // no such process, or only its zombie. Unknown (another host, no record): false, and the quorum's window runs.
  bool Gone(int id) const;
  absl::Status RecordPid();  // "pid/<id>" = "<host> <pid>", for fencing

  std::shared_ptr<Store> store_;  // the job's, under "in_place/": outlives every group
  std::shared_ptr<ProcessGroup> group_;
  ReplicaGroupOptions options_;
  int id_ = 0;
  Membership membership_;
  int64_t joins_seen_ = 0;          // the lead: join requests already announced
  int64_t grow_at_ = -1;            // the announced growth's step in this generation (-1: none seen)
  int64_t grow_generation_ = -1;
};

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_REPLICA_GROUP_H_
