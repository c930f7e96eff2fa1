// CollectiveObserver: the one seam through which a process group's collectives are watched from outside
// the collective path: the flight recorder, fault injection and the debug check, the CUDA-graph step, tests
// (docs/design.md's seams table says where each lives). A group without observers runs exactly the same code.
//
// For collective #seq on one rank: Issued, then Admit (which may refuse it), on the issuing thread before
// the call runs; Started (not always: a backend may only see the end) and Ended, on whichever thread the
// backend learns them (Gloo's worker, NCCL's watchdog); Failed at most once per group, before the Works of
// the failure wake their waiters with the text it returned appended; Aborting when a backend is about to
// free what its collectives use, after those Works failed.
#ifndef TINYDDP_DIST_PROCESS_GROUP_COLLECTIVE_OBSERVER_H_
#define TINYDDP_DIST_PROCESS_GROUP_COLLECTIVE_OBSERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// Point-to-point calls (Send, Recv, BatchSendRecv) involve two ranks, so they are numbered apart from the
/// collectives: observers see seq = kPointToPointSeqBase + the call's own number ("#p3"), never a
/// collective's. An observer that matches calls across ranks by seq skips them.
inline constexpr int64_t kPointToPointSeqBase = int64_t{1} << 40;
inline bool IsPointToPoint(int64_t seq) { return seq >= kPointToPointSeqBase; }

/// What a rank issued. Of a collective, every field but `description` reads the same on every rank.
struct CollectiveInfo {
  int64_t seq = 0;          // the group's sequence number (point-to-point: see kPointToPointSeqBase)
  std::string op;           // "AllReduce", "Broadcast", ..., "Replay", "Send", "Recv", "BatchSendRecv"
  std::string signature;    // "float32 [1000], AVG"; "float32 [1000] to 2 tag 0"
  std::string dtype;        // "float32" or ""
  std::string via;          // "" or the path ("copy engines")
  std::string description;  // the Work's: "AllReduce(float32 [1000] cuda:0, AVG) #7 on nccl rank 0/2"
  int64_t numel = 0, bytes = 0;  // what this rank contributes (its input)
  int bucket = -1;          // DDP's bucket index when the reducer issued it (CollectiveBucketScope), else -1
};

/// Called on the issuing thread (Issued, Admit) or on the backend's threads (Started, Ended, Failed):
/// implementations must be thread-safe, and cheap unless they mean to hold the call back (Admit).
class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  virtual void Issued(const CollectiveInfo& info) {}
  /// After every observer's Issued, before the group checks the arguments: an error refuses the call,
  /// which then fails with it on this rank as the group's first failure (reason "refused call").
  virtual absl::Status Admit(const CollectiveInfo& info) { return absl::OkStatus(); }
  virtual void Started(int64_t seq) {}
  virtual void Ended(int64_t seq, const absl::Status& status) {}
  /// The group's first failure (timeout, dead peer, a refused call; not bad arguments). Returns text to
  /// append to the error the user sees (e.g. "flight recorder: dumped to ..."), or "".
  virtual std::string Failed(absl::string_view reason, const absl::Status& status) { return ""; }
  /// The backend is about to free what its collectives use (NCCL: ncclCommAbort, whose cudaFree waits for
  /// the whole device); every Work in flight has failed. An observer that enqueued GPU work waiting on a
  /// peer lets it go here, so that the device drains. On the backend's thread, while no call is being
  /// enqueued; it may come more than once.
  virtual void Aborting() {}
};

/// While it lives, the collectives this thread issues carry `bucket` in their CollectiveInfo (DDP's reducer
/// sets it around its comm hook, so a flight record can say "bucket 0"). Scopes nest.
class CollectiveBucketScope {
 public:
  explicit CollectiveBucketScope(int bucket) : previous_(Current()) { Slot() = bucket; }
  ~CollectiveBucketScope() { Slot() = previous_; }
  CollectiveBucketScope(const CollectiveBucketScope&) = delete;
  CollectiveBucketScope& operator=(const CollectiveBucketScope&) = delete;
  /// The innermost scope's bucket on this thread, or -1.
  static int Current() { return Slot(); }

 private:
  static int& Slot() {
    thread_local int bucket = -1;
    return bucket;
  }
  const int previous_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_COLLECTIVE_OBSERVER_H_
