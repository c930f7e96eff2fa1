// CollectiveObserver: the one seam through which a process group's collectives are watched from outside
// the collective path: the flight recorder (dist/observe/flight_recorder/), fault injection
// (dist/observe/fault/), tests. ProcessGroup (process_group.h) tells its observers when it numbered a call
// (Issued), when a backend saw it begin and end (Started, Ended), and about its first failure (Failed).
// Observers never change what a collective does; a group without observers runs exactly the same code.
//
// The order, for collective #seq on one rank: Issued(seq) on the issuing thread, before the call runs; then
// Started(seq) (not always: a backend may only see the end) and Ended(seq, status), on whichever thread the
// backend learns them (Gloo's worker, NCCL's watchdog); Failed() at most once per group, before the Works of
// the failure wake their waiters with the text it returned appended.
#ifndef TINYDDP_DIST_PROCESS_GROUP_COLLECTIVE_OBSERVER_H_
#define TINYDDP_DIST_PROCESS_GROUP_COLLECTIVE_OBSERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// What a rank issued, as every rank sees it (no device index in `signature`).
struct CollectiveInfo {
  int64_t seq = 0;        // the group's sequence number
  std::string op;         // "AllReduce", "Broadcast", ..., "Replay"
  std::string signature;  // "float32 [1000], AVG" (portable: no cuda:N index)
  std::string dtype;      // "float32" or ""
  std::string via;        // "" or the path ("copy engines")
  int64_t numel = 0, bytes = 0;  // what this rank contributes (its input)
  int bucket = -1;        // DDP's bucket index when the reducer issued it (CollectiveBucketScope), else -1
};

/// Watches a process group's collectives (flight recorder, fault injection, exercise checks, tests).
/// Called on the thread that issues (Issued) or on the backend's progress thread / NCCL watchdog
/// (Started, Ended): implementations must be thread-safe and cheap (no blocking).
class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  virtual void Issued(const CollectiveInfo& info) {}
  virtual void Started(int64_t seq) {}
  virtual void Ended(int64_t seq, const absl::Status& status) {}
  /// The group's first failure (timeout, dead peer; not bad arguments). Returns text to append to the
  /// error the user sees (e.g. "flight recorder: dumped to ..."), or "".
  virtual std::string Failed(absl::string_view reason, const absl::Status& status) { return ""; }
};

/// While it lives, the collectives this thread issues carry `bucket` in their CollectiveInfo (DDP's reducer
/// sets it around its comm hook, so a flight record can say "bucket 0"). Scopes nest; each restores what it
/// found.
class CollectiveBucketScope {
 public:
  explicit CollectiveBucketScope(int bucket);
  ~CollectiveBucketScope();
  CollectiveBucketScope(const CollectiveBucketScope&) = delete;
  CollectiveBucketScope& operator=(const CollectiveBucketScope&) = delete;

  /// The innermost scope's bucket on this thread, or -1.
  static int Current();

 private:
  int previous_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_COLLECTIVE_OBSERVER_H_
