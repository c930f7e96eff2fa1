// CollectiveFingerprintCheck: TINYDDP_DISTRIBUTED_DEBUG=DETAIL, the check that turns the classic
// distributed bug (ranks calling different collectives, or the same one with different shapes) from a
// hang or silently wrong numbers into an error that names both sides. A wing (dist/observe/): a
// CollectiveObserver (dist/process_group/collective_observer.h) that refuses a call in Admit.
//
// Before collective #n runs, each rank publishes a fingerprint of the call ("AllReduce(float32 [1000],
// SUM)", with " via <path>" for an external all_reduce; no device index) in the store under "<n>/<rank>",
// waits for every other rank's, and compares. It runs on the caller's thread before the call is enqueued,
// so a mismatch stops the call before any bytes move. A store round trip per collective: a debugging aid,
// off by default (as in PyTorch). Programs that attach the flight recorder (ddp_mlp, collectives_demo)
// also call AttachDebugCheck, which honours the variable.
#ifndef TINYDDP_DIST_OBSERVE_DEBUG_CHECK_DEBUG_CHECK_H_
#define TINYDDP_DIST_OBSERVE_DEBUG_CHECK_DEBUG_CHECK_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "dist/process_group/collective_observer.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

class CollectiveFingerprintCheck : public CollectiveObserver {
 public:
  /// `store` is private to this group (a PrefixStore); `timeout` bounds the wait for the other ranks.
  CollectiveFingerprintCheck(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout);

  /// Publishes this rank's fingerprint of collective `info.seq` and compares it with every other rank's.
  /// FailedPrecondition names both calls when they differ; DeadlineExceeded names the ranks that did not
  /// reach the collective in time. Precondition: seq increases by one per call on every rank.
  absl::Status Admit(const CollectiveInfo& info) override;

  /// True when TINYDDP_DISTRIBUTED_DEBUG is "DETAIL" (case-insensitive).
  static bool RequestedByEnvironment();

 private:
  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
};

/// When TINYDDP_DISTRIBUTED_DEBUG=DETAIL, gives `group` a CollectiveFingerprintCheck over its store
/// (ProcessGroup::SubStore; every group InitProcessGroup builds has one), under the group's timeout.
/// Call on every rank before the group's first collective. Without a store it says so on stderr.
void AttachDebugCheck(ProcessGroup& group);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_DEBUG_CHECK_DEBUG_CHECK_H_
