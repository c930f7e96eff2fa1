// NewGroup: torch.distributed.new_group for tinyddp, a wing (dist/parallel/subgroups/). Every rank of a
// world group calls it with the same list of ranks; the members get a ProcessGroup of their own over just
// those ranks, the others get null. Tensor and pipeline parallelism, hybrid sharding and per-node groups
// are all built from such groups (device_mesh.h lays the ranks out on a grid of them).
//
//   auto even = dist::NewGroup(*world, store, {0, 2});  // collective: every rank of `world` calls it
//   if (*even) (*even)->AllReduce(t)->Wait();           // ranks 0 and 2 only; ranks 1 and 3 got null
//
// How: the n-th call in a process makes the n-th group on every rank (the order is the contract, as in
// torch), so "subgroup<n>" names the same keys in the job's store on every rank. The
// members build a backend group as InitProcessGroup builds the world: a PrefixStore under that key,
// ProcessGroupGloo::Create or ProcessGroupNCCL::Create with the member's rank in the group (its position in
// the sorted list, as torch numbers it) and the group's size. (The backends number their keys by a count
// of the groups this process created, which only agrees across ranks when every rank creates every group;
// the subgroup's own key space makes that count unnecessary, and new_group.cc drops it from the keys.)
// The new object has its own sequence
// numbers, its own timeout and, on NCCL, its own communicator, stream and watchdog: a collective of the
// subgroup is never matched against one of the world, and a hang in it is named by its own timeout.
//
// Why not ncclCommSplit: splitting the world's communicator is cheaper (no new bootstrap) but needs a
// handle on the world's ncclComm, which lives inside the NCCL core (dist/process_group/nccl) and which a
// wing does not reach. A unique id shared through the store and ncclCommInitRank is what torch's
// new_group itself does when it does not split, and it is the same code path the world already takes.
//
// Why the store is an argument: ProcessGroup keeps its store private. Pass the store the world was built
// on (RankContext::store in tests, the store a custom launcher made); NewGroup(world, ranks) without one
// asks the world for a key space of its own (ProcessGroup::SubStore: NCCL groups and the groups
// InitProcessGroup makes have one) and says so when it has none.
//
// The flight recorder (dist/observe/flight_recorder) watches a group it was attached to. With
// NewGroupOptions::flight_recorder a member's group gets one of its own, named "subgroup<n>" in its files
// (the same on every member; the group's own group_name() counts the ProcessGroup objects this process
// made, which differs between members and non-members), so `flight_recorder_analyze` gives one verdict per
// group. Attach one when the world has one (ddp_mlp's world always does).
// Not thread-safe: the training thread, like every call that defines a group's order.
#ifndef TINYDDP_DIST_PARALLEL_SUBGROUPS_NEW_GROUP_H_
#define TINYDDP_DIST_PARALLEL_SUBGROUPS_NEW_GROUP_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

struct NewGroupOptions {
  /// Bound on the group's setup and on each of its collectives; zero: the world's timeout.
  std::chrono::milliseconds timeout{0};
  /// Give each member's group a flight recorder of its own (the world's is not shared: records are per group).
  bool flight_recorder = false;
};

/// Collective over `world`: every rank calls it, in the same order relative to its other NewGroup calls,
/// with the same `ranks`. Members of `ranks` get a new group of the world's backend in which their rank is
/// their position in sorted(ranks); the other ranks get null (and OK). `store` is the store `world` was
/// built on (see the header comment). InvalidArgument when `ranks` is empty, has duplicates or ranks
/// outside [0, world.size()), or when the ranks passed different lists (every rank learns it: the lists
/// are compared with one all_gather on `world` first); the backend's error when the group cannot be set up.
absl::StatusOr<std::shared_ptr<ProcessGroup>> NewGroup(ProcessGroup& world, std::shared_ptr<Store> store,
                                                       std::vector<int> ranks, const NewGroupOptions& options = {});

/// The same with the store taken from world.SubStore("subgroup"): FailedPrecondition when the world keeps
/// none (a Gloo group made by ProcessGroupGloo::Create directly: pass its store).
absl::StatusOr<std::shared_ptr<ProcessGroup>> NewGroup(ProcessGroup& world, std::vector<int> ranks,
                                                       const NewGroupOptions& options = {});

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PARALLEL_SUBGROUPS_NEW_GROUP_H_
