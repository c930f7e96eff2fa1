// Blame: see blame.h.
#include "dist/observe/blame/blame.h"

#include <signal.h>
#include <cstdlib>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist {

std::vector<std::pair<std::string, std::string>> Blame::WorkerEnvironment(int round, int rank) {
  if (dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string path = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/tinyddp-errors-XXXXXX");
    if (::mkdtemp(path.data()) == nullptr) return {};  // blame then goes by the exits alone
    dir_ = path;
  }
  return {{kErrorFileEnv, absl::StrCat(dir_, "/rank-", rank, ".json")}};
}

std::optional<WorkerFailure> Blame::FailureOf(const WorkerExit& exit) const {
  if (dir_.empty() || exit.ok()) return std::nullopt;
  return ReadWorkerFailure(absl::StrCat(dir_, "/rank-", exit.rank, ".json"));
}

std::chrono::milliseconds Blame::HoldStop(const WorkerExit& exit, bool holding) {
  const std::optional<WorkerFailure> failure = FailureOf(exit);
  if (!failure || failure->kind == FailureKind::kError) return {};
  if (failure->kind == FailureKind::kTimeout && !holding) {
    // The others waiting in the same collective time out within moments; let them say so, so that the
    // one that does not is recognisable as the one everybody waited for.
    std::fprintf(stderr, "%s: %s timed out: %s\n", name_.c_str(), exit.Who().c_str(),
                 FirstLine(failure->message, 200).c_str());
    return settle_;
  }
  return holding ? settle_ : std::chrono::milliseconds{0};
}

void Blame::Judge(JobResult& result) {
  // The order of a failure: 0 its own (kError, or an exit we did not cause), 1 a timeout, 2 it gave way,
  // 3 none (we stopped it and it died of our signal). The lowest order wins, then the earliest time.
  std::vector<std::optional<WorkerFailure>> failures;
  const WorkerExit* root = nullptr;
  int root_order = 3;
  int64_t root_time = 0;
  for (const WorkerExit& exit : result.exits) {
    const std::optional<WorkerFailure>& failure = failures.emplace_back(FailureOf(exit));
    if (exit.ok()) continue;
    const bool died_of_our_signal =
        exit.signaled && (exit.value == SIGTERM || exit.value == SIGKILL || exit.value == SIGINT);
    const int order = failure ? static_cast<int>(failure->kind) : exit.stopped && died_of_our_signal ? 3 : 0;
    const int64_t time_us = failure ? failure->time_us : exit.time_us;
    if (order < root_order || (order == root_order && order < 3 && time_us < root_time)) {
      root = &exit;
      root_order = order;
      root_time = time_us;
    }
  }
  if (root == nullptr) return;  // nobody failed on their own: the stop's reason stands
  if (root_order == 2 && result.stop_requested) {  // the cause is elsewhere (another node), as it said
    result.cause_order.reset();
    return;
  }
  const std::optional<WorkerFailure>& failure = failures[root - result.exits.data()];
  result.first_failure = *root;
  result.exit_code = root->exit_code();
  result.cause_order = root_order;
  result.cause_time_us = root_time;
  result.permanent = root_order == 0 && !root->signaled && root->value == kPermanentFailureExitCode;
  result.reason = absl::StrCat(root->Who(), " failed first: ", root->How());
  if (failure) {
    absl::StrAppend(&result.reason, " (", FailureKindName(failure->kind), ": ", FirstLine(failure->message), ")");
  }
  if (root_order != 1) return;
  // A timeout: the ranks that did not time out themselves are the ones the others were waiting for.
  std::vector<std::string> suspects;
  for (size_t i = 0; i < result.exits.size(); ++i) {
    const WorkerExit& exit = result.exits[i];
    if (failures[i]) continue;
    suspects.push_back(absl::StrCat("rank ", exit.rank,
                                    exit.stopped ? " (still running when the others gave up: hung or stuck?)"
                                                 : absl::StrCat(" (", exit.How(), " before the others)")));
  }
  if (!suspects.empty()) absl::StrAppend(&result.reason, "; suspect ", absl::StrJoin(suspects, ", "));
}

void Blame::Finish(bool job_succeeded) {
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  dir_.clear();
}

}  // namespace tinyddp::dist
