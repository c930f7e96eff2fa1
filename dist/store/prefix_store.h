// PrefixStore: a view of another Store whose keys all start with "<prefix>/". Process groups use it
// so that two groups (or two init attempts) sharing one TCPStore never read each other's keys.
#ifndef TINYDDP_DIST_STORE_PREFIX_STORE_H_
#define TINYDDP_DIST_STORE_PREFIX_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

/// Thread-safe if the wrapped store is. NumKeys() counts the whole underlying store (as in c10d):
/// a store cannot count keys by prefix without listing them.
class PrefixStore : public Store {
 public:
  /// `base` must outlive this view unless it is shared through the shared_ptr.
  /// The timeout starts as base's and is applied to every blocking call made through this view.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base) : prefix_(std::move(prefix)), base_(std::move(base)) {
    set_timeout(base_->timeout());
  }

  absl::Status Set(const std::string& key, const Bytes& value) override { return base_->Set(Full(key), value); }
  /// Through the base's Wait, so that this view's timeout (not the base's) bounds it: two views of one
  /// store may want different timeouts.
  absl::StatusOr<Bytes> Get(const std::string& key) override {
    if (timeout_ == base_->timeout()) return base_->Get(Full(key));  // one request, not two
    RETURN_IF_ERROR(base_->Wait({Full(key)}, timeout_));
    return base_->Get(Full(key));
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override { return base_->Add(Full(key), delta); }
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return base_->CompareSet(Full(key), expected, desired);
  }
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(Full(k));
    return base_->Wait(full, timeout);
  }
  absl::StatusOr<bool> Delete(const std::string& key) override { return base_->Delete(Full(key)); }
  absl::StatusOr<int64_t> NumKeys() override { return base_->NumKeys(); }
  using Store::Set;
  using Store::Wait;

 private:
  std::string Full(const std::string& key) const { return prefix_ + "/" + key; }

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_PREFIX_STORE_H_
