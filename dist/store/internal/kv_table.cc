// KvTable: see kv_table.h. Integers live in the table as decimal text (as in c10d), so a Get of a
// counter returns "3" and every implementation agrees on what Add stored.
#include "dist/store/internal/kv_table.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist::internal {

KvTable::Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  // A day is "forever" for a rendezvous; clamping avoids time_point overflow for milliseconds::max().
  const auto capped = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  return KvTable::Clock::now() + std::max<std::chrono::milliseconds>(capped, std::chrono::milliseconds(0));
}

std::string FormatDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, "s");
  if (ms < 1000) return absl::StrCat(ms, "ms");
  return absl::StrCat(static_cast<double>(ms) / 1000.0, "s");
}

absl::Status KvTable::ClosedError() const {
  return absl::CancelledError("the store was shut down while this call was waiting");
}

absl::Status KvTable::Set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<Bytes> KvTable::Get(const std::string& key, Clock::time_point deadline,
                                   std::chrono::milliseconds timeout_for_message) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool found = changed_.wait_until(lock, deadline, [&] { return closed_ || values_.count(key) > 0; });
  if (closed_) return ClosedError();
  if (!found) {
    return absl::DeadlineExceededError(absl::StrCat("store: key '", key, "' was not set within ",
                                                    FormatDuration(timeout_for_message),
                                                    " (did every rank start? is one rank stuck or dead?)"));
  }
  return values_[key];
}

absl::StatusOr<int64_t> KvTable::Add(const std::string& key, int64_t delta) {
  int64_t now = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it != values_.end()) {
      const std::string text(it->second.begin(), it->second.end());
      if (!absl::SimpleAtoi(text, &now)) {
        return absl::InvalidArgumentError(absl::StrCat("store: Add on key '", key, "' whose value '", text,
                                                       "' is not an integer (it was set by Set, not Add)"));
      }
    }
    now += delta;
    const std::string text = absl::StrCat(now);
    values_[key] = Bytes(text.begin(), text.end());
  }
  changed_.notify_all();
  return now;
}

absl::StatusOr<Bytes> KvTable::CompareSet(const std::string& key, const Bytes& expected,
                                          const Bytes& desired) {
  Bytes result;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      if (expected.empty()) {
        values_[key] = desired;
        result = desired;
        changed = true;
      }  // else: absent and the caller expected a value: nothing stored, return empty.
    } else {
      if (it->second == expected) {
        it->second = desired;
        changed = true;
      }
      result = it->second;
    }
  }
  if (changed) changed_.notify_all();
  return result;
}

absl::Status KvTable::Wait(const std::vector<std::string>& keys, Clock::time_point deadline,
                           std::chrono::milliseconds timeout_for_message) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all_present = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return values_.count(k) > 0; });
  };
  const bool done = changed_.wait_until(lock, deadline, [&] { return closed_ || all_present(); });
  if (closed_) return ClosedError();
  if (done) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (values_.count(k) == 0) missing.push_back("'" + k + "'");
  }
  return absl::DeadlineExceededError(absl::StrCat("store: Wait timed out after ", FormatDuration(timeout_for_message),
                                                  "; still missing key", missing.size() > 1 ? "s " : " ",
                                                  absl::StrJoin(missing, ", "),
                                                  " (did every rank start? is one rank stuck or dead?)"));
}

absl::StatusOr<bool> KvTable::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.erase(key) > 0;
}

int64_t KvTable::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(values_.size());
}

void KvTable::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

}  // namespace tinyddp::dist::internal
