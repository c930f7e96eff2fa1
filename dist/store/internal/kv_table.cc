// KvTable: see kv_table.h. Integers live in the table as decimal text (as in c10d), so a Get of a
// counter returns "3" and every implementation agrees on what Add stored.
#include "dist/store/internal/kv_table.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/status_macros.h"

namespace tinyddp::dist::internal {
namespace {

// A timeout message lists this many missing keys, then "and N more": a Wait on 65536 keys must not
// produce a megabyte of error text.
constexpr size_t kMissingKeysShown = 10;

// A key as error text: quoted, and cut short if it is itself the problem.
std::string Quoted(const std::string& key) {
  return absl::StrCat("'", key.substr(0, 64), key.size() > 64 ? "...'" : "'");
}

// What one entry counts against the table's limit (store.h, kDefaultStoreMaxBytes).
uint64_t EntryBytes(const std::string& key, const Bytes& value) {
  return key.size() + value.size() + kStoreEntryOverheadBytes;
}

}  // namespace

std::chrono::milliseconds ClampTimeout(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout, std::chrono::milliseconds(0), kMaxStoreTimeout);
}

KvTable::Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  return KvTable::Clock::now() + ClampTimeout(timeout);
}

std::string FormatBytes(uint64_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  if (n >= (1u << 10) && n % (1u << 10) == 0) return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " bytes");
}

absl::Status CheckKey(const std::string& key) {
  if (key.size() <= kMaxStoreKeyBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("store: key ", Quoted(key), " is ", FormatBytes(key.size()),
                                                 ", over the limit of ", FormatBytes(kMaxStoreKeyBytes),
                                                 " (kMaxStoreKeyBytes): keys are names; put data in values"));
}

absl::Status CheckValue(const std::string& key, size_t value_bytes) {
  if (value_bytes <= kMaxStoreValueBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "store: the value for key ", Quoted(key), " is ", FormatBytes(value_bytes), ", over the limit of ",
      FormatBytes(kMaxStoreValueBytes),
      " (kMaxStoreValueBytes): the store holds rendezvous metadata; send data through a process group"));
}

absl::Status CheckWaitKeys(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxStoreWaitKeys) {
    return absl::InvalidArgumentError(absl::StrCat("store: Wait on ", keys.size(), " keys, over the limit of ",
                                                   kMaxStoreWaitKeys,
                                                   " (kMaxStoreWaitKeys): wait in batches, or count arrivals "
                                                   "with Add on one key"));
  }
  for (const auto& k : keys) RETURN_IF_ERROR(CheckKey(k));
  return absl::OkStatus();
}

absl::Status KvTable::Put(const std::string& key, Bytes value) {
  auto old = values_.find(key);
  const uint64_t rest = total_bytes_ - (old == values_.end() ? 0 : EntryBytes(key, old->second));
  if (rest + EntryBytes(key, value) > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "store: setting key ", Quoted(key), " (", FormatBytes(value.size()), ") would bring the table to ",
        FormatBytes(rest + EntryBytes(key, value)), ", over its limit of ", FormatBytes(max_bytes_),
        " (keys, values and ", kStoreEntryOverheadBytes, " bytes a key). Is something writing keys in a loop? "
        "A job that needs more: set TINYDDP_STORE_MAX_BYTES (bytes) for the process hosting the store (the "
        "launcher, or rank 0), or TCPStoreServerOptions::max_table_bytes"));
  }
  total_bytes_ = rest + EntryBytes(key, value);
  values_.insert_or_assign(key, std::move(value));
  return absl::OkStatus();
}

absl::Status KvTable::Set(const std::string& key, Bytes value) {
  RETURN_IF_ERROR(CheckKey(key));
  RETURN_IF_ERROR(CheckValue(key, value.size()));
  return Put(key, std::move(value));
}

const Bytes* KvTable::Find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

absl::Status GetTimedOut(const std::string& key, std::chrono::milliseconds timeout) {
  return absl::DeadlineExceededError(absl::StrCat("store: key ", Quoted(key), " was not set within ",
                                                  absl::FormatDuration(absl::FromChrono(ClampTimeout(timeout))),
                                                  " (did every rank start? is one rank stuck or dead?)"));
}

absl::Status WaitTimedOut(const std::vector<std::string>& missing, std::chrono::milliseconds timeout) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < missing.size() && i < kMissingKeysShown; ++i) shown.push_back(Quoted(missing[i]));
  const size_t more = missing.size() - shown.size();
  return absl::DeadlineExceededError(
      absl::StrCat("store: Wait timed out after ", absl::FormatDuration(absl::FromChrono(ClampTimeout(timeout))),
                   "; still missing key", missing.size() > 1 ? "s " : " ", absl::StrJoin(shown, ", "),
                   more > 0 ? absl::StrCat(" and ", more, " more") : "",
                   " (did every rank start? is one rank stuck or dead?)"));
}

absl::StatusOr<int64_t> KvTable::Add(const std::string& key, int64_t delta) {
  RETURN_IF_ERROR(CheckKey(key));
  int64_t now = 0;
  auto it = values_.find(key);
  if (it != values_.end()) {
    const std::string text(it->second.begin(), it->second.end());
    if (!absl::SimpleAtoi(text, &now)) {
      return absl::InvalidArgumentError(absl::StrCat("store: Add on key ", Quoted(key), " whose value '",
                                                     text.substr(0, 64),
                                                     "' is not an integer (it was set by Set, not Add)"));
    }
  }
  now = static_cast<int64_t>(static_cast<uint64_t>(now) + static_cast<uint64_t>(delta));  // wraps, never UB
  const std::string text = absl::StrCat(now);
  RETURN_IF_ERROR(Put(key, Bytes(text.begin(), text.end())));
  return now;
}

absl::StatusOr<Bytes> KvTable::CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  RETURN_IF_ERROR(CheckKey(key));
  RETURN_IF_ERROR(CheckValue(key, expected.size()));
  RETURN_IF_ERROR(CheckValue(key, desired.size()));
  auto it = values_.find(key);
  if (it == values_.end()) {
    if (!expected.empty()) return Bytes();  // absent, and the caller expected a value: nothing stored
    RETURN_IF_ERROR(Put(key, desired));
    return desired;
  }
  if (it->second == expected) RETURN_IF_ERROR(Put(key, desired));
  return it->second;
}

absl::StatusOr<bool> KvTable::Delete(const std::string& key) {
  RETURN_IF_ERROR(CheckKey(key));
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  total_bytes_ -= EntryBytes(key, it->second);
  values_.erase(it);
  return true;
}

}  // namespace tinyddp::dist::internal
