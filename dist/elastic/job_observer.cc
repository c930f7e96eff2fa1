// Observers around a round of workers: see job_observer.h.
#include "dist/elastic/job_observer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

void AttachObservers(const std::vector<JobObserver*>& observers, int round, std::vector<WorkerProcessSpec>& specs,
                     SupervisorOptions& options) {
  for (WorkerProcessSpec& spec : specs) {
    for (JobObserver* observer : observers) {
      for (auto& kv : observer->WorkerEnvironment(round, spec.rank)) spec.env.push_back(kv);
    }
  }
  for (JobObserver* observer : observers) observer->RoundStarting(round, specs);
  if (observers.empty()) return;
  options.hold_stop = [observers](const WorkerExit& exit, bool holding) {
    std::chrono::milliseconds hold{0};
    for (JobObserver* observer : observers) hold = std::max(hold, observer->HoldStop(exit, holding));
    return hold;
  };
}

void JudgeRound(const std::vector<JobObserver*>& observers, JobResult& result) {
  const bool was_interrupted = result.interrupted;
  for (const WorkerExit& e : result.exits) {  // it checkpointed on SIGTERM/SIGUSR1 (ours or its own)
    if (!e.signaled && e.value == kPreemptedExitCode) result.exit_code = kPreemptedExitCode;
  }
  result.interrupted |= result.exit_code == kPreemptedExitCode;
  if (result.interrupted && !was_interrupted) {  // a worker preempted itself: how the job stopped, no cause
    result.cause_order.reset();
    result.cause_time_us = 0;
    if (result.first_failure) {
      result.reason = absl::StrCat(result.first_failure->Who(), " exited with ", result.first_failure->How());
    }
  }
  for (const WorkerExit& e : result.exits) {
    // A permanent error while a signal stopped the job (a full disk under the stop checkpoint) is how it
    // ended: its status, not the signal's, which a restart policy keyed on exit codes would retry.
    if (result.interrupted && !e.signaled && e.value == kPermanentFailureExitCode && !result.permanent) {
      result.permanent = true;
      result.exit_code = kPermanentFailureExitCode;
      result.reason = absl::StrCat(e.Who(), " failed with exit code ", e.value, " (a permanent error) while the job "
                                   "stopped (", result.reason, ")");
    }
  }
  if (result.interrupted) return;
  if (const std::optional<WorkerExit>& first = result.first_failure) {
    result.permanent = !first->signaled && first->value == kPermanentFailureExitCode;
  }
  for (JobObserver* observer : observers) observer->Judge(result);
}

}  // namespace tinyddp::dist
