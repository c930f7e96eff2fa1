// KeepGoingAfterLoss: the launcher's half of in-place recovery, a JobObserver (dist/elastic/job_observer.h,
// the seam both `launch` and ddp_mlp's own spawner attach to). Plainly the supervisor stops every worker when
// one fails; with --min_replicas the survivors recover by themselves (replica_group.h), so it must not:
//   * HoldStop: a failed worker holds the stop back for the rest of the job (a week, as a backstop: "never
//     forever"); the survivors end it themselves, exiting 0 when training is done, or non-zero once fewer
//     than --min_replicas remain;
//   * Judge: a job in which some worker exited 0 succeeded (the survivors finished together: they had one
//     membership), whatever happened to the replicas it lost; the line says which were lost;
//   * rejoin, within a budget of replacements (--max_restarts): a worker killed by a signal is started again
//     as a replacement (kReplacementEnv set, the same rank's command line and environment), which joins the
//     survivors' group at a step boundary with their live state (dist/elastic/in_place/rejoin.cc). It runs
//     beside the round's workers, not among them: this observer starts it, and reaps it when the round ends.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_KEEP_GOING_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_KEEP_GOING_H_

#include <chrono>
#include <string>
#include <vector>

#include "dist/elastic/job_observer.h"

namespace tinyddp::dist::in_place {

/// Set ("1") in a replacement's environment: it joins the replica group instead of the world (ddp_mlp).
inline constexpr char kReplacementEnv[] = "TINYDDP_IN_PLACE_REPLACEMENT";
/// Set in every worker's environment while replacements may come: the members then look for them each step.
inline constexpr char kReplacementsEnv[] = "TINYDDP_IN_PLACE_REPLACEMENTS";

class KeepGoingAfterLoss : public JobObserver {
 public:
  /// `replacements`: how many lost workers may be replaced over the job (0: the job goes on smaller).
  explicit KeepGoingAfterLoss(int replacements = 0) : replacements_left_(replacements) {}
  std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round, int rank) override;
  void RoundStarting(int round, const std::vector<WorkerProcessSpec>& specs) override { specs_ = specs; }
  std::chrono::milliseconds HoldStop(const WorkerExit& exit, bool holding) override;
  void Judge(JobResult& result) override;
  void Finish(bool job_succeeded) override;

 private:
  int replacements_left_ = 0;
  std::vector<WorkerProcessSpec> specs_;
  std::vector<int> replacement_pids_;
};

/// For `launch`, which does not know its program's flags: whether `program` (PROGRAM and its arguments) asks for
/// in-place recovery, --min_replicas=K with K > 0 (as launch reads the program's own --timeout).
bool ProgramAsksToKeepGoing(const std::vector<std::string>& program);

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_KEEP_GOING_H_
