// HashStore: every call forwards to the shared KvTable (internal/kv_table.h), which TCPStore's server
// also uses, so the in-memory and networked stores cannot drift apart in semantics.
#include "dist/store/hash_store.h"

namespace tinyddp::dist {

absl::Status HashStore::Set(const std::string& key, const Bytes& value) { return table_.Set(key, value); }

absl::StatusOr<Bytes> HashStore::Get(const std::string& key) {
  return table_.Get(key, timeout_);
}

absl::StatusOr<int64_t> HashStore::Add(const std::string& key, int64_t delta) { return table_.Add(key, delta); }

absl::StatusOr<Bytes> HashStore::CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return table_.CompareSet(key, expected, desired);
}

absl::Status HashStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return table_.Wait(keys, timeout);
}

absl::StatusOr<bool> HashStore::Delete(const std::string& key) { return table_.Delete(key); }

absl::StatusOr<int64_t> HashStore::NumKeys() { return table_.NumKeys(); }

}  // namespace tinyddp::dist
