// PrefixStore: a view of another Store whose keys all start with "<prefix>/". Process groups use it
// so that two groups (or two init attempts) sharing one TCPStore never read each other's keys.
#ifndef TINYDDP_DIST_STORE_PREFIX_STORE_H_
#define TINYDDP_DIST_STORE_PREFIX_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "dist/store/store.h"

namespace tinyddp::dist {

/// Thread-safe if the wrapped store is. NumKeys() counts the whole underlying store (as in c10d):
/// a store cannot count keys by prefix without listing them.
class PrefixStore : public Store {
 public:
  /// `base` must outlive this view unless it is shared through the shared_ptr.
  /// The timeout starts as base's and is applied to every blocking call made through this view.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  absl::Status Set(const std::string& key, const Bytes& value) override;
  absl::StatusOr<Bytes> Get(const std::string& key) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  absl::StatusOr<bool> Delete(const std::string& key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  using Store::Set;
  using Store::Wait;

  const std::string& prefix() const { return prefix_; }
  Store& base() { return *base_; }

 private:
  std::string Full(const std::string& key) const { return prefix_ + "/" + key; }

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_PREFIX_STORE_H_
