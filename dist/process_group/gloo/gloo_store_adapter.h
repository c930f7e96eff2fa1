// GlooStoreAdapter: lets Gloo's rendezvous (gloo::rendezvous::Context::connectFullMesh) run over our
// Store, so Gloo finds its peers through the same TCPStore as everything else in the job.
//
// Gloo's Store interface is small (set, get, wait) and reports failures by throwing; ours returns
// absl::Status. The adapter turns a failed Status into gloo::IoException carrying the message, which
// ProcessGroupGloo catches and converts back, so a rendezvous timeout reaches the user as a Status.
#ifndef TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_STORE_ADAPTER_H_
#define TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_STORE_ADAPTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/store/store.h"
#include "gloo/rendezvous/store.h"

namespace tinyddp::dist {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  /// `store` should be private to one Gloo context (a PrefixStore), since Gloo uses short keys ("rank_0").
  /// `timeout` bounds get() and wait() (Gloo's own timeout argument is not used: see wait()).
  GlooStoreAdapter(std::shared_ptr<dist::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<dist::Store> store_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_GLOO_GLOO_STORE_ADAPTER_H_
