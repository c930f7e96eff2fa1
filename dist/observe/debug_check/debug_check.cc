// The fingerprint exchange: one Set, one Wait for the other ranks' keys, one Get per rank.
#include "dist/observe/debug_check/debug_check.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tinyddp::dist {

namespace {

std::string Key(int64_t seq, int rank) { return absl::StrCat(seq, "/", rank); }

}  // namespace

CollectiveFingerprintCheck::CollectiveFingerprintCheck(std::shared_ptr<Store> store, int rank, int size,
                                                       std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {}

bool CollectiveFingerprintCheck::RequestedByEnvironment() {
  const char* v = std::getenv("TINYDDP_DISTRIBUTED_DEBUG");
  return v != nullptr && absl::EqualsIgnoreCase(v, "DETAIL");
}

absl::Status CollectiveFingerprintCheck::Admit(const CollectiveInfo& info) {
  if (IsPointToPoint(info.seq)) return absl::OkStatus();  // two ranks take part, not all: nothing to compare
  const int64_t seq = info.seq;
  const std::string fingerprint =
      absl::StrCat(info.op, "(", info.signature, ")", info.via.empty() ? "" : absl::StrCat(" via ", info.via));
  if (absl::Status s = store_->Set(Key(seq, rank_), fingerprint); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("debug check of collective #", seq, ": cannot publish ",
                                               fingerprint, " to the store: ", s.message()));
  }
  std::vector<std::string> others;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) others.push_back(Key(seq, r));
  }
  const auto started = std::chrono::steady_clock::now();
  if (absl::Status s = store_->Wait(others, timeout_); !s.ok()) {
    // A store that did not answer within the timeout (its host, rank 0 or the launcher, is frozen or gone)
    // would make every probe below wait as long again: report that instead of asking it more.
    if (std::chrono::steady_clock::now() - started > timeout_ + std::chrono::seconds(1) || !absl::IsDeadlineExceeded(s)) {
      return absl::Status(s.code(), absl::StrCat("debug check: rank ", rank_, " called ", fingerprint,
                                                 " as collective #", seq, " but the store did not answer: ",
                                                 s.message()));
    }
    // Name the ranks that never arrived: the user's question is "which rank is stuck?". The store answers
    // each probe at once (it just answered the Wait).
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (!store_->Wait({Key(seq, r)}, std::chrono::milliseconds(0)).ok()) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "debug check: rank ", rank_, " called ", fingerprint, " as collective #", seq, " but rank(s) ",
        absl::StrJoin(missing, ", "), " did not reach collective #", seq, " within ", timeout_.count(),
        " ms (stuck, exited early, or made fewer collective calls)"));
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    absl::StatusOr<std::string> theirs = store_->GetString(Key(seq, r));
    RETURN_IF_ERROR(theirs);
    if (*theirs != fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "collective mismatch: rank ", rank_, " called ", fingerprint, " as collective #", seq, " but rank ", r,
          " called ", *theirs, " (every rank must issue the same collectives, in the same order, with the "
          "same shapes and dtypes)"));
    }
  }
  // Every rank has published #seq, so every rank has finished reading #seq-1: our old key can go.
  if (seq > 0) (void)store_->Delete(Key(seq - 1, rank_));
  return absl::OkStatus();
}

void AttachDebugCheck(ProcessGroup& group) {
  if (!CollectiveFingerprintCheck::RequestedByEnvironment()) return;
  std::shared_ptr<Store> store = group.SubStore("debug");
  if (store == nullptr) {
    std::fprintf(stderr, "TINYDDP_DISTRIBUTED_DEBUG=DETAIL: group %s has no store to compare calls in; not checked\n",
                 group.group_name().c_str());
    return;
  }
  group.AddObserver(
      std::make_shared<CollectiveFingerprintCheck>(std::move(store), group.rank(), group.size(), group.timeout()));
}

}  // namespace tinyddp::dist
