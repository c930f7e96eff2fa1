// AgreeOnMembership: see quorum.h.
#include "dist/elastic/in_place/quorum.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace tinyddp::dist::in_place {
namespace {

Bytes ToBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string ToString(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::string ArrivedKey(int64_t generation, int id) { return absl::StrCat("g", generation, "/arrived/", id); }

// Waits until every previous member has arrived, or has arrived or is known gone, or the window has passed.
// True when every one arrived.
absl::StatusOr<bool> WaitForSurvivors(Store& store, int64_t generation, const std::vector<int>& previous,
                                      std::chrono::milliseconds window, const std::function<bool(int id)>& gone) {
  std::vector<std::string> keys;
  for (int member : previous) keys.push_back(ArrivedKey(generation, member));
  if (!gone) return store.Wait(keys, window).ok();
  const auto deadline = std::chrono::steady_clock::now() + window;
  const std::string arrivals = absl::StrCat("g", generation, "/arrivals");
  for (;;) {  // a poll of a counter (Add 0 never waits) and of the kernel, every 5 ms
    ASSIGN_OR_RETURN(const int64_t arrived, store.Add(arrivals, 0));
    if (arrived >= static_cast<int64_t>(previous.size())) return true;
    int64_t known_gone = 0;
    for (int member : previous) known_gone += gone(member) ? 1 : 0;
    if (arrived + known_gone >= static_cast<int64_t>(previous.size())) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::string DecisionKey(int64_t generation) { return absl::StrCat("g", generation, "/decision"); }

// "step;source;id,id,..."
std::string EncodeMembership(const Membership& m) {
  return absl::StrCat(m.step, ";", m.source, ";", absl::StrJoin(m.members, ","));
}

absl::StatusOr<Membership> DecodeMembership(int64_t generation, const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ';');
  Membership m;
  m.generation = generation;
  bool ok = parts.size() == 3 && absl::SimpleAtoi(parts[0], &m.step) && absl::SimpleAtoi(parts[1], &m.source);
  for (absl::string_view id : absl::StrSplit(parts.size() == 3 ? parts[2] : "", ',', absl::SkipEmpty())) {
    int value = 0;
    ok = ok && absl::SimpleAtoi(id, &value);
    m.members.push_back(value);
  }
  if (!ok || m.members.empty()) {
    return absl::DataLossError(absl::StrCat("in-place recovery: generation ", generation, "'s decision \"", text,
                                            "\" in the store is not one this program writes (another job on the "
                                            "same store port?)"));
  }
  return m;
}

int Membership::IndexOf(int id) const {
  auto it = std::find(members.begin(), members.end(), id);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

std::string Membership::ToString() const {
  return absl::StrCat("generation ", generation, ": replicas ", absl::StrJoin(members, ","), " from step ", step,
                      " (state from ", source, ")");
}


absl::StatusOr<Membership> AgreeOnMembership(Store& store, int64_t generation, const std::vector<int>& previous, int id,
                                             int64_t next_step, std::chrono::milliseconds window,
                                             const std::function<bool(int id)>& gone) {
  RETURN_IF_ERROR(store.Set(ArrivedKey(generation, id), ToBytes(absl::StrCat(next_step))));
  RETURN_IF_ERROR(store.Add(absl::StrCat("g", generation, "/arrivals"), 1).status());
  // Wait for everyone, up to the window; then see who came. A dead or frozen member never does.
  ASSIGN_OR_RETURN(const bool everyone, WaitForSurvivors(store, generation, previous, window, gone));
  Membership proposal;
  proposal.generation = generation;
  proposal.step = -1;
  for (int member : previous) {
    if (!everyone && gone && gone(member)) continue;  // arrived or not, its process is gone
    if (!everyone && !store.Wait({ArrivedKey(generation, member)}, std::chrono::milliseconds(1)).ok()) continue;
    ASSIGN_OR_RETURN(const Bytes value, store.Get(ArrivedKey(generation, member)));
    int64_t step = 0;
    if (!absl::SimpleAtoi(ToString(value), &step)) return absl::DataLossError("in-place recovery: a bad arrival");
    proposal.members.push_back(member);  // a replacement still joining arrives with step -1: never the source
    if (step > proposal.step) {  // members ascend: the first at the largest step is the lowest id there
      proposal.step = step;
      proposal.source = member;
    }
  }
  // The first proposal written is the decision; every survivor reads that one (quorum.h says why).
  ASSIGN_OR_RETURN(const Bytes decided,
                   store.CompareSet(DecisionKey(generation), Bytes(), ToBytes(EncodeMembership(proposal))));
  ASSIGN_OR_RETURN(Membership decision, DecodeMembership(generation, ToString(decided)));
  if (decision.IndexOf(id) < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "excluded: replica ", id, " reached the quorum of recovery generation ", generation,
        " after the others had decided without it (", decision.ToString(),
        "); it leaves the job. A longer --recovery_window waits longer for slow survivors"));
  }
  return decision;
}

}  // namespace tinyddp::dist::in_place
