// Blame: which rank's failure started it all, judged from the error files the workers write
// (error_file.h); a JobObserver (dist/elastic/job_observer.h) that the launch binary and ddp_mlp's
// self-start attach. Without it (the demos' plain self-start) the first failure seen is the job's.
//
// When one rank fails, the others fail moments later *because of it*: their next collective sees a closed
// connection, or times out waiting. All of them exit non-zero within milliseconds, and which exit the
// launcher notices first is luck. So every worker gets a file to explain its failure in, and:
//
//   - a rank that failed on its own (its file says "error", or it died without one and without being
//     stopped by us: a crash, an outside SIGKILL) beats one that only gave up waiting ("timeout"), which
//     beats one that stopped because another failed ("peer"); within a kind the earliest wins;
//   - after the first timeout the others get a moment (settle) to time out too before they are stopped;
//     a rank still running then, which never timed out, is named as the suspect (a hang):
//
//     launch: job failed: rank 0 (local rank 0, pid 4242) failed first: exit code 1 (timeout: ...);
//             suspect rank 1 (still running when the others gave up: hung or stuck?)
#ifndef TINYDDP_DIST_OBSERVE_BLAME_BLAME_H_
#define TINYDDP_DIST_OBSERVE_BLAME_BLAME_H_

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/elastic/job_observer.h"
#include "dist/launch/supervisor.h"
#include "dist/observe/blame/error_file.h"

namespace tinyddp::dist {

class Blame : public JobObserver {
 public:
  /// `name` starts its own line on stderr ("launch"); `settle`: how long after the first timeout the
  /// others may take to report theirs.
  explicit Blame(std::string name, std::chrono::milliseconds settle = std::chrono::seconds(1))
      : name_(std::move(name)), settle_(settle) {}
  ~Blame() override { Finish(false); }

  /// TINYDDP_ERROR_FILE=<a folder of this round>/rank-<N>.json (nothing when no folder can be made).
  std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round, int rank) override;
  /// The first timeout holds the stop for `settle` (and says so); while it runs, timeouts and peers'
  /// failures hold it too. An own failure stops the others at once.
  std::chrono::milliseconds HoldStop(const WorkerExit& exit, bool holding) override;
  /// Names the root cause as above, with the rank's own words and a timeout's suspects.
  void Judge(JobResult& result) override;
  /// Removes the round's folder.
  void Finish(bool job_succeeded) override;

 private:
  std::optional<WorkerFailure> FailureOf(const WorkerExit& exit) const;

  std::string name_;
  std::chrono::milliseconds settle_;
  std::string dir_;  // this round's error files ("" between rounds)
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_BLAME_BLAME_H_
