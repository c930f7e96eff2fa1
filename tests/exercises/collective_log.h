// CollectiveLog: what a rank's process group was asked to do, kept so that an exercise's check can say
// WHICH collectives a solution used ("one ReduceScatter, then one AllGather"), not only how many. It is a
// CollectiveObserver (dist/process_group/collective_observer.h): attach it with pg.AddObserver(log) before
// the solution runs; it sees every call as the rank issues it, before the call runs, and changes nothing.
#ifndef TINYDDP_TESTS_EXERCISES_COLLECTIVE_LOG_H_
#define TINYDDP_TESTS_EXERCISES_COLLECTIVE_LOG_H_

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/process_group/collective_observer.h"

namespace tinyddp::exercises {

/// Thread-safe: a group may tell it from its backend's threads as well as from the issuing one.
class CollectiveLog : public dist::CollectiveObserver {
 public:
  void Issued(const dist::CollectiveInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(info);
  }

  /// The calls issued since the last Take, oldest first; forgets them.
  std::vector<dist::CollectiveInfo> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<dist::CollectiveInfo> taken;
    taken.swap(calls_);
    return taken;
  }

  /// Just the operations' names: {"ReduceScatter", "AllGather"}.
  static std::vector<std::string> Ops(const std::vector<dist::CollectiveInfo>& calls) {
    std::vector<std::string> ops;
    for (const dist::CollectiveInfo& c : calls) ops.push_back(c.op);
    return ops;
  }

  /// "ReduceScatter(float32 [4] <- float32 [8]), AllGather(float32 [8] <- float32 [4])", or "no collective".
  static std::string Describe(const std::vector<dist::CollectiveInfo>& calls) {
    if (calls.empty()) return "no collective";
    return absl::StrJoin(calls, ", ", [](std::string* out, const dist::CollectiveInfo& c) {
      absl::StrAppend(out, c.op, "(", c.signature, ")");
    });
  }

 private:
  std::mutex mu_;
  std::vector<dist::CollectiveInfo> calls_;
};

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_COLLECTIVE_LOG_H_
