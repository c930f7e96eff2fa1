// KeepGoingAfterLoss: see keep_going.h.
#include "dist/elastic/in_place/keep_going.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist::in_place {

std::chrono::milliseconds KeepGoingAfterLoss::HoldStop(const WorkerExit& exit, bool holding) {
  return std::chrono::hours(24 * 7);
}

void KeepGoingAfterLoss::Judge(JobResult& result) {
  if (result.interrupted || result.exit_code == 0) return;
  std::vector<std::string> finished, lost;
  for (const WorkerExit& exit : result.exits) {
    (exit.ok() ? finished : lost).push_back(absl::StrCat(exit.rank));
  }
  if (finished.empty()) return;  // nobody finished: the job failed (fewer than --min_replicas remained)
  result.exit_code = 0;
  result.reason = absl::StrCat("finished by replicas ", absl::StrJoin(finished, ","), " after losing ",
                               absl::StrJoin(lost, ","), " (in-place recovery, --min_replicas)");
}

bool ProgramAsksToKeepGoing(const std::vector<std::string>& program) {
  int64_t k = 0;
  for (size_t i = 1; i < program.size(); ++i) {
    if (absl::StartsWith(program[i], "--min_replicas=")) {
      k = absl::SimpleAtoi(program[i].substr(15), &k) ? k : 0;
    } else if (program[i] == "--min_replicas" && i + 1 < program.size()) {
      k = absl::SimpleAtoi(program[i + 1], &k) ? k : 0;
    }
  }
  return k > 0;
}

}  // namespace tinyddp::dist::in_place
