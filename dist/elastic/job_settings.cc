// Job settings: see job_settings.h. Keys under "tinyddp/launch/" in the job's store: "node/<n>" (who
// claimed node_rank n), "settings/<n>" (its record), "settings/outcome" ("ok" or the first difference).
#include "dist/elastic/job_settings.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "dist/worker/job_timeout.h"

namespace tinyddp::dist {
namespace {

constexpr char kOutcomeKey[] = "tinyddp/launch/settings/outcome";
std::string SettingsKey(int node) { return absl::StrCat("tinyddp/launch/settings/", node); }

// "--nnodes=2" -> {"--nnodes", "2"}; a missing line is {"", "(nothing)"}.
std::pair<std::string, std::string> Setting(const std::vector<std::string>& lines, size_t i) {
  if (i >= lines.size()) return {"", "(nothing)"};
  std::pair<std::string, std::string> kv = absl::StrSplit(lines[i], absl::MaxSplits('=', 1));
  if (kv.second.size() > 200) kv.second = kv.second.substr(0, 200) + "...";
  return kv;
}

}  // namespace

std::string JobSettingsRecord(const LaunchOptions& o, int nproc) {
  std::vector<std::string> program = o.program;
  if (!program.empty()) program[0] = program[0].substr(program[0].rfind('/') + 1);
  return absl::StrCat("--nnodes=", o.nnodes, "\n--nproc_per_node=", nproc, "\n--max_restarts=", o.max_restarts,
                      "\n--timeout=", FormatTimeout(o.timeout),
                      "\nthe program=", absl::StrReplaceAll(absl::StrJoin(program, " "), {{"\n", " "}}));
}

std::string CompareJobSettings(const std::string& record_a, int node_a, const std::string& record_b, int node_b) {
  const std::vector<std::string> a = absl::StrSplit(record_a, '\n'), b = absl::StrSplit(record_b, '\n');
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const auto [name_a, value_a] = Setting(a, i);
    const auto [name_b, value_b] = Setting(b, i);
    if (name_a == name_b && value_a == value_b) continue;
    const std::string name = name_a.empty() ? name_b : name_a;
    return absl::StrCat("the launchers disagree on ", name,
                        name == "--timeout" ? " (launch's, else the program's, else TINYDDP_TIMEOUT)" : "", ": node ",
                        node_a, " has ", value_a, ", node ", node_b, " has ", value_b,
                        "; start every node's launch with the same --nnodes, --nproc_per_node, --max_restarts, "
                        "--timeout and program");
  }
  return "";
}

absl::Status MeetOtherLaunchers(Store& store, const LaunchOptions& o, int nproc, std::chrono::milliseconds timeout) {
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const std::string id = absl::StrCat(host, ":", o.node_rank, "@pid", ::getpid());
  auto owner = store.CompareSet(absl::StrCat("tinyddp/launch/node/", o.node_rank), {}, Bytes(id.begin(), id.end()));
  RETURN_IF_ERROR(owner);
  if (std::string(owner->begin(), owner->end()) != id) {
    return absl::FailedPreconditionError(absl::StrCat("two launchers claim --node_rank=", o.node_rank,
                                                      " (the other is ", std::string(owner->begin(), owner->end()),
                                                      "); give each machine its own node_rank"));
  }
  const std::string mine = JobSettingsRecord(o, nproc);
  RETURN_IF_ERROR(store.Set(SettingsKey(o.node_rank), mine));

  // The first outcome written is everyone's. Node 0 hosts the store: after a difference it keeps it up a
  // moment longer, for the others (who look every second) to read it.
  auto conclude = [&](const std::string& outcome) -> absl::Status {
    ASSIGN_OR_RETURN(const Bytes stored, store.CompareSet(kOutcomeKey, {}, Bytes(outcome.begin(), outcome.end())));
    const std::string text(stored.begin(), stored.end());
    if (text == "ok") return absl::OkStatus();
    if (o.node_rank == 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    return absl::FailedPreconditionError(text);
  };
  // Node `node`'s record, waited for in slices of a second so as to notice an outcome reached meanwhile.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto settings_of = [&](int node) -> absl::StatusOr<std::string> {
    for (;;) {
      absl::Status s = store.Wait({SettingsKey(node)}, std::chrono::seconds(1));
      if (s.ok()) return store.GetString(SettingsKey(node));
      if (!absl::IsDeadlineExceeded(s)) return s;
      if (store.Wait({kOutcomeKey}, std::chrono::milliseconds(1)).ok()) {
        RETURN_IF_ERROR(conclude(""));  // the outcome is a difference elsewhere: every launcher stops
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("node ", node, "'s launcher did not join within ",
                                                        FormatTimeout(timeout),
                                                        "; start `launch --node_rank=I` on each of the ", o.nnodes,
                                                        " machines with the same --master_addr/--master_port"));
      }
    }
  };
  for (int node = o.node_rank == 0 ? 1 : 0; node < (o.node_rank == 0 ? o.nnodes : 1); ++node) {
    ASSIGN_OR_RETURN(const std::string theirs, settings_of(node));
    const std::string difference = node < o.node_rank ? CompareJobSettings(theirs, node, mine, o.node_rank)
                                                      : CompareJobSettings(mine, o.node_rank, theirs, node);
    if (!difference.empty()) return conclude(difference);
  }
  if (o.node_rank == 0) return conclude("ok");
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  absl::Status decided = store.Wait({kOutcomeKey}, std::max(left, std::chrono::milliseconds(1)));
  if (absl::IsDeadlineExceeded(decided)) {
    return absl::DeadlineExceededError(absl::StrCat("not every node's launcher joined within ", FormatTimeout(timeout),
                                                    " (node 0 is still waiting for one); start `launch --node_rank=I` "
                                                    "on each of the ",
                                                    o.nnodes, " machines"));
  }
  RETURN_IF_ERROR(decided);
  return conclude("");
}

}  // namespace tinyddp::dist
