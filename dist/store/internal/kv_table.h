// KvTable: the in-memory key-value table behind both HashStore (one process) and the TCPStore server.
// It implements the Store semantics once, the limits of store.h included: blocking reads wait with a
// deadline, never forever. A blocked Get/Wait sleeps on one condition variable, woken when a new key
// arrives, and checks its keys from where it left off (a key seen stays counted). The TCPStore server
// never blocks here: its event loop parks waiters itself and asks Find what is there now.
//
// Thread-safety: every method may be called from any thread. Close() wakes every waiter, which then
// fails with Cancelled.
#ifndef TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_
#define TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

class KvTable {
 public:
  using Clock = std::chrono::steady_clock;

  /// A table of at most `max_bytes` (store.h's kDefaultStoreMaxBytes says what counts); a write that
  /// would go past it is ResourceExhausted, naming the limit and how to raise it.
  explicit KvTable(uint64_t max_bytes = kDefaultStoreMaxBytes) : max_bytes_(max_bytes) {}

  /// Sets key to value and wakes the waiters it completes. (By value: the server moves its copy in.)
  absl::Status Set(const std::string& key, Bytes value);
  /// Waits up to `timeout` (ClampTimeout) for key; DeadlineExceeded names the key and the timeout.
  absl::StatusOr<Bytes> Get(const std::string& key, std::chrono::milliseconds timeout);
  /// The value of key if it is set now, else nullptr; never waits. Valid until the key's next change.
  const Bytes* Find(const std::string& key);
  /// Adds delta to the decimal integer at key (missing = 0). InvalidArgument if the value is not an integer.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  /// Store::CompareSet's semantics.
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired);
  /// Waits up to `timeout` until every key exists; DeadlineExceeded lists (the first few of) the keys
  /// still missing.
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  absl::StatusOr<bool> Delete(const std::string& key);
  int64_t NumKeys();
  /// Wakes all waiters and makes every later blocking call fail with Cancelled.
  void Close();

 private:
  /// Stores value unless the table would outgrow max_bytes_; if key is new, wakes the waiters.
  /// Caller holds mu_.
  absl::Status PutLocked(const std::string& key, Bytes value);
  /// Blocks until every key has appeared (since the call began), the deadline or Close.
  /// Returns OK, DeadlineExceeded (without a message: the caller writes it) or Cancelled.
  absl::Status AwaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                           Clock::time_point deadline);

  std::mutex mu_;
  std::unordered_map<std::string, Bytes> values_;
  std::condition_variable new_key_;  // a key that was absent is set
  bool closed_ = false;
  const uint64_t max_bytes_;
  uint64_t total_bytes_ = 0;  // what max_bytes_ bounds, for every key in values_
};

/// InvalidArgument, naming the limit and what to do, for a key over kMaxStoreKeyBytes.
absl::Status CheckKey(const std::string& key);
/// InvalidArgument for a value (of `key`) over kMaxStoreValueBytes.
absl::Status CheckValue(const std::string& key, size_t value_bytes);
/// InvalidArgument for more than kMaxStoreWaitKeys keys, or one key over its limit.
absl::Status CheckWaitKeys(const std::vector<std::string>& keys);

/// The DeadlineExceeded of a Get of `key`, and of a Wait whose keys `missing` were not all set.
absl::Status GetTimedOut(const std::string& key, std::chrono::milliseconds timeout);
absl::Status WaitTimedOut(const std::vector<std::string>& missing, std::chrono::milliseconds timeout);

/// `timeout` clamped into [0, kMaxStoreTimeout].
std::chrono::milliseconds ClampTimeout(std::chrono::milliseconds timeout);
/// Converts a user timeout into a deadline, ClampTimeout first (so milliseconds::max() cannot overflow).
KvTable::Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout);

/// "16 MiB", "4 KiB", "4097 bytes": for error messages.
std::string FormatBytes(uint64_t n);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_
