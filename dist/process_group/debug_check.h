// CollectiveFingerprintCheck: TINYDDP_DISTRIBUTED_DEBUG=DETAIL, the check that turns the classic
// distributed bug (ranks calling different collectives, or the same one with different shapes) from a
// hang or silently wrong numbers into an error that names both sides.
//
// Before collective #n runs, each rank publishes a fingerprint of the call ("AllReduce(float32 [1000],
// SUM)") in the Store under "<n>/<rank>", waits for every other rank's, and compares. ProcessGroup calls
// it from the caller's thread before enqueueing, so a mismatch stops the call before any bytes move.
// This costs a store round trip per collective: a debugging aid, off by default (as in PyTorch).
#ifndef TINYDDP_DIST_PROCESS_GROUP_DEBUG_CHECK_H_
#define TINYDDP_DIST_PROCESS_GROUP_DEBUG_CHECK_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

class CollectiveFingerprintCheck {
 public:
  /// `store` is private to this group (a PrefixStore); `timeout` bounds the wait for the other ranks.
  CollectiveFingerprintCheck(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout);

  /// Publishes this rank's `fingerprint` of collective `seq` and compares it with every other rank's.
  /// FailedPrecondition names both calls when they differ; DeadlineExceeded names the ranks that did not
  /// reach collective `seq` in time. Precondition: seq increases by one per call on every rank.
  absl::Status Check(int64_t seq, const std::string& fingerprint);

  /// True when TINYDDP_DISTRIBUTED_DEBUG is "DETAIL" (case-insensitive).
  static bool RequestedByEnvironment();

 private:
  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_DEBUG_CHECK_H_
