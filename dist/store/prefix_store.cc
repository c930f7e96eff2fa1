// PrefixStore: rewrites keys and forwards. Get goes through the base store's Wait+Get so that this
// view's timeout (not the base's) bounds it: two views of one store may want different timeouts.
#include "dist/store/prefix_store.h"

#include <utility>
#include "base/status_macros.h"

namespace tinyddp::dist {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  set_timeout(base_->timeout());
}

absl::Status PrefixStore::Set(const std::string& key, const Bytes& value) { return base_->Set(Full(key), value); }

absl::StatusOr<Bytes> PrefixStore::Get(const std::string& key) {
  RETURN_IF_ERROR(base_->Wait({Full(key)}, timeout_));
  return base_->Get(Full(key));
}

absl::StatusOr<int64_t> PrefixStore::Add(const std::string& key, int64_t delta) {
  return base_->Add(Full(key), delta);
}

absl::StatusOr<Bytes> PrefixStore::CompareSet(const std::string& key, const Bytes& expected,
                                              const Bytes& desired) {
  return base_->CompareSet(Full(key), expected, desired);
}

absl::Status PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(Full(k));
  return base_->Wait(full, timeout);
}

absl::StatusOr<bool> PrefixStore::Delete(const std::string& key) { return base_->Delete(Full(key)); }

absl::StatusOr<int64_t> PrefixStore::NumKeys() { return base_->NumKeys(); }

}  // namespace tinyddp::dist
