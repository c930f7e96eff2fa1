// KvTable: the in-memory key-value table behind both HashStore (one process) and the TCPStore server
// (whose connection threads all share one table). It implements the Store semantics once:
// blocking reads wait on a condition variable with a deadline, never forever.
//
// Thread-safety: every method may be called from any thread. Close() wakes every waiter, which then
// fails with Cancelled; the server uses it to shut down without waiting out clients' timeouts.
#ifndef TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_
#define TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

class KvTable {
 public:
  using Clock = std::chrono::steady_clock;

  /// Sets key to value and wakes every waiter.
  absl::Status Set(const std::string& key, const Bytes& value);
  /// Waits until `deadline` for key. DeadlineExceeded names the key and `timeout_for_message`.
  absl::StatusOr<Bytes> Get(const std::string& key, Clock::time_point deadline,
                            std::chrono::milliseconds timeout_for_message);
  /// Adds delta to the decimal integer at key (missing = 0). InvalidArgument if the value is not an integer.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  /// Store::CompareSet's semantics.
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired);
  /// Waits until every key exists; DeadlineExceeded lists the keys still missing.
  absl::Status Wait(const std::vector<std::string>& keys, Clock::time_point deadline,
                    std::chrono::milliseconds timeout_for_message);
  absl::StatusOr<bool> Delete(const std::string& key);
  int64_t NumKeys();
  /// Wakes all waiters and makes every later blocking call fail with Cancelled.
  void Close();

 private:
  absl::Status ClosedError() const;

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
  bool closed_ = false;
};

/// Converts a user timeout into a deadline, saturating huge timeouts instead of overflowing.
KvTable::Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout);

/// "300s", "1.5s", "250ms": for error messages.
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_
