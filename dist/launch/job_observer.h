// JobObserver: the launcher's one seam for what a program adds around its workers, round by round, without
// the launcher knowing it. Two wings attach here: the flight recorder's directory and verdict
// (dist/observe/flight_recorder/job_records.h) and the root-cause blame of the workers' error files
// (dist/observe/blame/blame.h). RunLauncher (launcher.h) and SpawnWorkersIfNeeded (spawn.h) take a list of
// them and hand it to each round's Supervisor; without any, a job runs the plain way: the first failure
// seen is the job's, and the other workers are stopped at once. Called on the launcher's own thread only.
#ifndef TINYDDP_DIST_LAUNCH_JOB_OBSERVER_H_
#define TINYDDP_DIST_LAUNCH_JOB_OBSERVER_H_

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tinyddp::dist {

struct WorkerExit;  // supervisor.h
struct JobResult;

class JobObserver {
 public:
  virtual ~JobObserver() = default;

  /// Added to the environment of the worker of global rank `rank` in round `round` (0, then 1, 2, ...
  /// after restarts).
  virtual std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round, int rank) { return {}; }

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

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_JOB_OBSERVER_H_
