// JobObserver: the launcher's one seam for what a program adds around its workers, round by round, without
// the launcher knowing it: the flight recorder's directory and verdict (dist/observe/flight_recorder/
// job_records.h) is the one there is. RunLauncher (launcher.h) and SpawnWorkersIfNeeded (spawn.h) take one;
// without it they start and watch the workers exactly the same. Called on the launcher's own thread only.
#ifndef TINYDDP_DIST_LAUNCH_JOB_OBSERVER_H_
#define TINYDDP_DIST_LAUNCH_JOB_OBSERVER_H_

#include <string>
#include <utility>
#include <vector>

namespace tinyddp::dist {

class JobObserver {
 public:
  virtual ~JobObserver() = default;

  /// What to add to the environment of every worker of round `round` (0, then 1, 2, ... after restarts).
  virtual std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round) { return {}; }

  /// After round `round` failed: what the observer can say about it, on stderr, each line starting with
  /// `prefix` ("launch: "). `ranks_here`: this node's ranks (empty: every rank of the job is here).
  virtual void FailedRound(int round, const std::string& prefix, const std::vector<int>& ranks_here) {}

  /// After each round; `job_succeeded` once the job is over and every worker exited with 0.
  virtual void Finish(bool job_succeeded) {}
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_JOB_OBSERVER_H_
