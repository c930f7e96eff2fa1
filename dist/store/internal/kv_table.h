// KvTable: the in-memory key-value table behind both HashStore (one process) and the TCPStore server.
// It implements the Store semantics once, the limits of store.h included. It never blocks: a Get or Wait
// whose key is missing waits in its owner (HashStore on a condition variable, the server as a waiter
// parked in its event loop), which asks Find again when a key changes.
//
// Not thread-safe: the owner serializes calls (HashStore under its mutex; the server's one thread).
#ifndef TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_
#define TINYDDP_DIST_STORE_INTERNAL_KV_TABLE_H_

#include <chrono>
#include <cstdint>
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

  /// Sets key to value. (By value: the server moves its copy in.)
  absl::Status Set(const std::string& key, Bytes value);
  /// The value of key if it is set now, else nullptr. Valid until the key's next change.
  const Bytes* Find(const std::string& key) const;
  /// Adds delta to the decimal integer at key (missing = 0). InvalidArgument if the value is not an integer.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  /// Store::CompareSet's semantics.
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired);
  absl::StatusOr<bool> Delete(const std::string& key);
  int64_t NumKeys() const { return static_cast<int64_t>(values_.size()); }

 private:
  /// Stores value unless the table would outgrow max_bytes_.
  absl::Status Put(const std::string& key, Bytes value);

  std::unordered_map<std::string, Bytes> values_;
  const uint64_t max_bytes_;
  uint64_t total_bytes_ = 0;  // what max_bytes_ bounds, for every key in values_
};

/// InvalidArgument, naming the limit and what to do, for a key over kMaxStoreKeyBytes.
absl::Status CheckKey(const std::string& key);
/// InvalidArgument for a value (of `key`) over kMaxStoreValueBytes.
absl::Status CheckValue(const std::string& key, size_t value_bytes);
/// InvalidArgument for more than kMaxStoreWaitKeys keys, or one key over its limit.
absl::Status CheckWaitKeys(const std::vector<std::string>& keys);

/// The DeadlineExceeded of a Get of `key`, and of a Wait whose keys `missing` were not all set
/// (listing the first few).
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
