// CollectiveLog: what a rank's process group was asked to do, kept so that an exercise's check can say
// WHICH collectives a solution used ("one ReduceScatter, then one AllGather"), not only how many, and for
// point-to-point calls (Send, Recv, BatchSendRecv) which transfers, to whom. It is a CollectiveObserver
// (dist/process_group/collective_observer.h): attach it with pg.AddObserver(log) before the solution
// runs; it sees every call as the rank issues it, before the call runs, and changes nothing.
#ifndef TINYDDP_TESTS_EXERCISES_COLLECTIVE_LOG_H_
#define TINYDDP_TESTS_EXERCISES_COLLECTIVE_LOG_H_

#include <cstdint>
#include <mutex>
#include <regex>
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

  /// One send or receive of a point-to-point call.
  struct Transfer {
    bool send = false;
    int peer = -1;
    int tag = 0;
    int64_t numel = 0;
  };
  /// The sends and receives of a point-to-point call, in its order, read from its signature ("float32 [5]
  /// to 1 tag 0"; a batch: "send float32 [5] to 1 tag 0, recv float32 [5] from 2 tag 0"); empty for a
  /// collective.
  static std::vector<Transfer> Transfers(const dist::CollectiveInfo& call) {
    std::vector<Transfer> transfers;
    if (!dist::IsPointToPoint(call.seq)) return transfers;
    static const std::regex kOne(R"(\S+ \[([0-9, ]*)\](?: \S+)? (to|from) (\d+) tag (\d+))");
    for (std::sregex_iterator it(call.signature.begin(), call.signature.end(), kOne), end; it != end; ++it) {
      const std::smatch& m = *it;
      Transfer t{.send = m[2] == "to", .peer = std::stoi(m[3]), .tag = std::stoi(m[4]), .numel = 1};
      std::string dims = m[1];
      for (size_t at = 0; at < dims.size();) {  // "4, 7" -> 28; "" (a scalar) -> 1
        const size_t comma = dims.find(',', at);
        t.numel *= std::stoll(dims.substr(at, comma - at));
        at = comma == std::string::npos ? dims.size() : comma + 1;
      }
      transfers.push_back(t);
    }
    return transfers;
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
