// HashStore: a Store held in this process's memory, for single-process tests and for threads that
// play several ranks. Same semantics as TCPStore (blocking Get/Wait with timeouts), no sockets.
#ifndef TINYDDP_DIST_STORE_HASH_STORE_H_
#define TINYDDP_DIST_STORE_HASH_STORE_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "dist/store/internal/kv_table.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

/// Thread-safe; share one HashStore between the threads that rendezvous through it.
class HashStore : public Store {
 public:
  HashStore() = default;
  explicit HashStore(std::chrono::milliseconds timeout) { set_timeout(timeout); }

  absl::Status Set(const std::string& key, const Bytes& value) override;
  /// Waits up to timeout() for key; DeadlineExceeded names the key.
  absl::StatusOr<Bytes> Get(const std::string& key) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  /// Waits up to `timeout` for every key; DeadlineExceeded lists the missing ones.
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  absl::StatusOr<bool> Delete(const std::string& key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  using Store::Set;
  using Store::Wait;

 private:
  /// Sleeps until every key has been seen (a key seen stays counted) or the deadline; true if all were.
  bool AwaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout);

  std::mutex mu_;
  std::condition_variable changed_;  // a Set, Add or CompareSet happened
  internal::KvTable table_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_HASH_STORE_H_
