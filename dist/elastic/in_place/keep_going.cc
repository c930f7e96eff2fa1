// KeepGoingAfterLoss: see keep_going.h.
#include "dist/elastic/in_place/keep_going.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

}  // namespace tinyddp::dist::in_place
