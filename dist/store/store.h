// Store: the key-value store ranks use to find each other (rendezvous) before any collective exists.
//
// The vocabulary is c10d's: Set/Get/Add/CompareSet/Wait/Delete/NumKeys. Get and Wait block until the key
// appears, but never forever: each has a timeout (default 300 s, at most kMaxStoreTimeout) and fails with
// DeadlineExceeded naming the key. Implementations: TCPStore (tcp_store.h, server in rank 0's process or
// the launcher), HashStore (in memory, one process), PrefixStore (namespaces keys of another store).
// All implementations are thread-safe.
//
// A store holds rendezvous metadata (addresses, NCCL ids, counters), not data, so every implementation
// bounds what one call may ask for (the limits below) and refuses more with InvalidArgument naming the
// key, the size and the limit, and bounds the whole table (ResourceExhausted). TCPStore adds a job secret
// (TINYDDP_STORE_SECRET, store_secret.h): client and server each prove they know it before any key is
// read or written (Unauthenticated without one, PermissionDenied for a wrong one). It authenticates;
// it does not encrypt: keys and values cross the network in the clear.
#ifndef TINYDDP_DIST_STORE_STORE_H_
#define TINYDDP_DIST_STORE_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"

namespace tinyddp::dist {

using Bytes = std::vector<uint8_t>;

inline constexpr std::chrono::milliseconds kDefaultStoreTimeout = std::chrono::seconds(300);

// The limits, and why each is what it is:
/// Keys are names ("pg0/rank/17/addr"); 4 KiB leaves room for deeply nested PrefixStores.
inline constexpr size_t kMaxStoreKeyBytes = 4 << 10;
/// The largest value a rendezvous writes is Gloo's full-mesh address list, ~140 bytes per peer:
/// 16 MiB covers 100k ranks. NCCL ids are 128 bytes.
inline constexpr size_t kMaxStoreValueBytes = 16 << 20;
/// One Wait names at most this many keys: one per rank of a 65536-rank job.
inline constexpr size_t kMaxStoreWaitKeys = 1 << 16;
/// What the whole table may hold: each key's bytes, its value's and kStoreEntryOverheadBytes (the table's
/// own bookkeeping), so neither big values nor many tiny keys can exhaust the host's memory. A write past
/// it is ResourceExhausted. Gloo's full mesh stores ~140 bytes per pair of ranks: 64 MiB holds it for ~680
/// ranks. A TCPStore server takes another limit from TINYDDP_STORE_MAX_BYTES (tcp_store_server.h).
inline constexpr uint64_t kDefaultStoreMaxBytes = 64 << 20;
inline constexpr size_t kStoreEntryOverheadBytes = 128;
/// Longer timeouts (milliseconds::max() included) are clamped to this: "never forever".
inline constexpr std::chrono::milliseconds kMaxStoreTimeout = std::chrono::hours(24);

class Store {
 public:
  virtual ~Store() = default;

  /// Sets key to value, waking every Get/Wait blocked on it. key <= kMaxStoreKeyBytes,
  /// value <= kMaxStoreValueBytes (else InvalidArgument; so for every key and value below).
  virtual absl::Status Set(const std::string& key, const Bytes& value) = 0;
  /// The value of key, waiting up to timeout() for it to be set.
  virtual absl::StatusOr<Bytes> Get(const std::string& key) = 0;
  /// Atomically adds delta to the integer stored at key (missing = 0) and returns the new value.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  /// If key holds `expected` (an empty `expected` means "key absent"), sets it to `desired`.
  /// Returns the value now stored.
  virtual absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected,
                                           const Bytes& desired) = 0;
  /// Waits until every key exists, up to `timeout`. At most kMaxStoreWaitKeys keys.
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
