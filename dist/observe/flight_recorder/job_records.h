// JobRecords: the launcher's side of the flight recorder (recorder.h), a JobObserver
// (dist/elastic/job_observer.h). It gives every worker of a job one directory for its ring files
// (TINYDDP_FLIGHT_RECORDER_DIR), and after a failed round reads them all and prints one verdict, e.g.
//
//   launch: flight recorder (pg0): collective #1091 AllReduce(float32 [262144], AVG) (bucket 0, 1.0 MiB):
//           ranks {1} never started it; rank 1's last completed collective is #1090
//
// Because the rings are files written in place, a rank that was killed or frozen still says where it was.
// The launch binary (//dist/launch:launch) and ddp_mlp's self-start (SpawnOptions::job_observers) attach it;
// it links only the analyzer (verdict.h), a function of files, never a process group.
#ifndef TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_JOB_RECORDS_H_
#define TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_JOB_RECORDS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/elastic/job_observer.h"

namespace tinyddp::dist {

class JobRecords : public JobObserver {
 public:
  static constexpr int kKeptJobs = 5;

  /// For the job this process is about to start. Its directory, chosen when the first round starts:
  /// $TINYDDP_FLIGHT_RECORDER_DIR when the user set it (kept for good), else a fresh
  /// job-<date>-<time>-<pid>-XXXXXX in the default directory ($TMPDIR/tinyddp-flight-recorder), which is
  /// removed when the job succeeds or its failure was in no collective; of the failed jobs' folders there,
  /// the newest kKeptJobs are kept (this one's included), older ones removed as a job starts and as one
  /// fails (unless their launcher still runs). None when none can be made: workers then keep their records
  /// in memory and dump to the default directory. Cheap until then, so a worker may build one unused.
  static std::shared_ptr<JobRecords> ForThisJob();

  /// TINYDDP_FLIGHT_RECORDER_DIR for every worker of round `round` (an elastic job's restarts each get a
  /// folder of their own, <dir>/round<N>, so that a round's verdict reads only its own files).
  std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round, int rank) override;

  /// After round `round` failed: prints the verdict on stderr, each line starting with `prefix`
  /// ("launch: "), and where the files are ("no collective was issued" when this node's ranks wrote none;
  /// only "no collective was pending" when every rank completed all it issued: not a collective's failure).
  /// `ranks_here`: this node's ranks; with several nodes the others' files are on their machines (unless
  /// the directory is shared), and they are not blamed here.
  void FailedRound(int round, const std::string& prefix, const std::vector<int>& ranks_here) override;

  /// After each round: removes a directory made here once the job has succeeded, or while it holds no records
  /// worth keeping (no verdict pointed into a collective); else keeps it and the newest kKeptJobs in all.
  void Finish(bool job_succeeded) override;

  std::string RoundDir(int round) const;

 private:
  void ChooseDirOnce();

  bool chosen_ = false;
  std::string dir_;
  bool made_here_ = false;
  bool worth_keeping_ = false;  // a failed round's verdict pointed into a collective (or the files need a look)
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_JOB_RECORDS_H_
