// HashStore: every call runs on the shared KvTable (internal/kv_table.h), which TCPStore's server also
// uses, so the in-memory and networked stores cannot drift apart in semantics. What the table does not
// do, waiting, is done here: a blocked Get/Wait sleeps until a write, then asks the table again.
#include "dist/store/hash_store.h"

#include "base/status_macros.h"

namespace tinyddp::dist {

bool HashStore::AwaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) {
  size_t seen = 0;
  return changed_.wait_until(lock, internal::DeadlineAfter(timeout), [&] {
    while (seen < keys.size() && table_.Find(keys[seen]) != nullptr) ++seen;
    return seen == keys.size();
  });
}

absl::Status HashStore::Set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lock(mu_);
  changed_.notify_all();
  return table_.Set(key, value);
}

absl::StatusOr<Bytes> HashStore::Get(const std::string& key) {
  RETURN_IF_ERROR(internal::CheckKey(key));
  std::unique_lock<std::mutex> lock(mu_);
  // A loop: the key may be deleted again between the wake-up and here.
  while (table_.Find(key) == nullptr) {
    if (!AwaitLocked(lock, {key}, timeout_)) return internal::GetTimedOut(key, timeout_);
  }
  return *table_.Find(key);
}

absl::StatusOr<int64_t> HashStore::Add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  changed_.notify_all();
  return table_.Add(key, delta);
}

absl::StatusOr<Bytes> HashStore::CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> lock(mu_);
  changed_.notify_all();
  return table_.CompareSet(key, expected, desired);
}

absl::Status HashStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(internal::CheckWaitKeys(keys));
  std::unique_lock<std::mutex> lock(mu_);
  if (AwaitLocked(lock, keys, timeout)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (table_.Find(k) == nullptr) missing.push_back(k);
  }
  return internal::WaitTimedOut(missing, timeout);
}

absl::StatusOr<bool> HashStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.Delete(key);
}

absl::StatusOr<int64_t> HashStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.NumKeys();
}

}  // namespace tinyddp::dist
