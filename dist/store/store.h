// Store: the key-value store ranks use to find each other (rendezvous) before any collective exists.
//
// The vocabulary is c10d's: Set/Get/Add/CompareSet/Wait/Delete/NumKeys. Get and Wait block until the key
// appears, but never forever: each has a timeout (default 300 s) and fails with DeadlineExceeded naming
// the key. Implementations: TCPStore (tcp_store.h, server in rank 0's process or the launcher),
// HashStore (in memory, one process), PrefixStore (namespaces keys of another store).
// All implementations are thread-safe.
#ifndef TINYDDP_DIST_STORE_STORE_H_
#define TINYDDP_DIST_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"

namespace tinyddp::dist {

using Bytes = std::vector<uint8_t>;

inline constexpr std::chrono::milliseconds kDefaultStoreTimeout = std::chrono::seconds(300);

class Store {
 public:
  virtual ~Store() = default;

  /// Sets key to value, waking every Get/Wait blocked on it.
  virtual absl::Status Set(const std::string& key, const Bytes& value) = 0;
  /// The value of key, waiting up to timeout() for it to be set.
  virtual absl::StatusOr<Bytes> Get(const std::string& key) = 0;
  /// Atomically adds delta to the integer stored at key (missing = 0) and returns the new value.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  /// If key holds `expected` (an empty `expected` means "key absent"), sets it to `desired`.
  /// Returns the value now stored.
  virtual absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected,
                                           const Bytes& desired) = 0;
  /// Waits until every key exists, up to `timeout`.
  virtual absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  absl::Status Wait(const std::vector<std::string>& keys) { return Wait(keys, timeout_); }
  /// Removes key; returns whether it existed.
  virtual absl::StatusOr<bool> Delete(const std::string& key) = 0;
  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  // Conveniences over the byte API.
  absl::Status Set(const std::string& key, const std::string& value) {
    return Set(key, Bytes(value.begin(), value.end()));
  }
  absl::StatusOr<std::string> GetString(const std::string& key) {
    auto v = Get(key);
    RETURN_IF_ERROR(v);
    return std::string(v->begin(), v->end());
  }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultStoreTimeout;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_STORE_H_
