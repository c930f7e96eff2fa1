// JobObserver: the elastic agent's seam for what a program adds around its workers, round by round, without
// the launcher knowing it. Two wings attach here: the flight recorder's directory and verdict
// (dist/observe/flight_recorder/job_records.h) and the root-cause blame of the workers' error files
// (dist/observe/blame/blame.h). RunLauncher (launcher.h) and SpawnElasticWorkersIfNeeded (spawn.h) take a
// list of them and attach it to each round's Supervisor (dist/launch/supervisor.h) with AttachObservers and
// JudgeRound below; without any, a job runs the plain way: the first failure seen is the job's, and the
// other workers are stopped at once. Called on the launcher's own thread only.
//
// JudgeRound also names the two endings a restart cannot fix, by the worker's exit status (sysexits.h):
// kPermanentFailureExitCode (a full disk, a read-only folder) and kPreemptedExitCode (a worker told to
// stop checkpointed first).
#ifndef TINYDDP_DIST_ELASTIC_JOB_OBSERVER_H_
#define TINYDDP_DIST_ELASTIC_JOB_OBSERVER_H_

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "dist/launch/supervisor.h"

namespace tinyddp::dist {

/// EX_CANTCREAT: a worker's exit status for a failure no restart can fix. A job whose root cause exited
/// with it is not restarted.
inline constexpr int kPermanentFailureExitCode = 73;
/// EX_TEMPFAIL: a worker told to stop (SIGTERM, SIGUSR1) checkpointed first. Not restarted, as after a signal.
inline constexpr int kPreemptedExitCode = 75;

class JobObserver {
 public:
  virtual ~JobObserver() = default;

  /// Added to the environment of the worker of global rank `rank` in round `round` (0, then 1, 2, ...
  /// after restarts).
  virtual std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round, int rank) { return {}; }

  /// Right before round `round`'s workers start, with their specs as they will run (environment included).
  virtual void RoundStarting(int round, const std::vector<WorkerProcessSpec>& specs) {}

  /// A worker failed while the others still run: how long they may take to report their own failures
  /// before they are stopped (zero: stop them now). `holding`: an earlier failure's hold is running.
  virtual std::chrono::milliseconds HoldStop(const WorkerExit& exit, bool holding) { return {}; }

  /// Once every worker of the round is gone: may name another root cause in `result`.
  virtual void Judge(JobResult& result) {}

  /// After round `round` failed: what the observer can say about it, on stderr, each line starting with
  /// `prefix` ("launch: "). `ranks_here`: this node's ranks (empty: every rank of the job is here).
  virtual void FailedRound(int round, const std::string& prefix, const std::vector<int>& ranks_here) {}

  /// After each round; `job_succeeded` once the job is over and every worker exited with 0.
  virtual void Finish(bool job_succeeded) {}
};

/// Before Supervisor::Start: each observer's WorkerEnvironment added to `specs` (round `round`), and
/// `options.hold_stop` the longest hold any observer asks for.
void AttachObservers(const std::vector<JobObserver*>& observers, int round, std::vector<WorkerProcessSpec>& specs,
                     SupervisorOptions& options);

/// After Supervisor::Wait: a worker that exited with kPreemptedExitCode makes it the job's status (an
/// interruption); a permanent error while a signal stopped the job is how it ended; otherwise the root
/// cause's permanence, then each observer's Judge.
void JudgeRound(const std::vector<JobObserver*>& observers, JobResult& result);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_JOB_OBSERVER_H_
