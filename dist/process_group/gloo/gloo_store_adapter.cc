// GlooStoreAdapter: byte-for-byte forwarding, with Status failures rethrown as gloo::IoException.
#include "dist/process_group/gloo/gloo_store_adapter.h"

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace tinyddp::dist {

namespace {

[[noreturn]] void Throw(const char* what, const std::string& key, const absl::Status& status) {
  throw gloo::IoException(absl::StrCat("Gloo rendezvous: store ", what, "(\"", key, "\") failed: ",
                                       status.ToString()));
}

}  // namespace

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = store_->Set(key, Bytes(data.begin(), data.end()));
  if (!s.ok()) Throw("set", key, s);
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  // Store::Get waits for the key up to the store's own timeout; wait first so ours applies.
  if (absl::Status s = store_->Wait({key}, timeout_); !s.ok()) Throw("get", key, s);
  absl::StatusOr<Bytes> value = store_->Get(key);
  if (!value.ok()) Throw("get", key, value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  // Always our timeout, whatever Gloo passes: 0 (gloo::kNoTimeout) would mean forever, and during the
  // rendezvous ProcessGroupGloo::Create shortens the context's timeout for Gloo's connection setup only.
  if (absl::Status s = store_->Wait(keys, timeout_); !s.ok()) {
    Throw("wait", keys.empty() ? std::string() : keys.front(), s);
  }
}

}  // namespace tinyddp::dist
