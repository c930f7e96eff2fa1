// JobFlightRecorder: the launcher's side of the process groups' flight recorder
// (dist/process_group/flight_recorder.h). It gives every worker of a job one directory for its ring files
// (TINYDDP_FLIGHT_RECORDER_DIR), and after a failed job reads them all and prints one verdict, e.g.
//
//   launch: flight recorder (pg0): collective #1091 AllReduce(float32 [262144], AVG) (bucket 0, 1.0 MiB):
//           ranks {1} never started it; rank 1's last completed collective is #1090
//
// Because the rings are files written in place, a rank that was killed or frozen still says where it was.
// The launcher knows no process group (dist/visibility.bzl); it links only the analyzer, a function of files.
#ifndef TINYDDP_DIST_LAUNCH_JOB_FLIGHT_RECORDER_H_
#define TINYDDP_DIST_LAUNCH_JOB_FLIGHT_RECORDER_H_

#include <string>
#include <utility>
#include <vector>

namespace tinyddp::dist {

class JobFlightRecorder {
 public:
  /// The job's directory: $TINYDDP_FLIGHT_RECORDER_DIR when the user set it (kept afterwards), else a
  /// fresh one under $TMPDIR (removed once the job has succeeded). Empty when none can be made: workers
  /// then keep their records in memory and dump to the default directory.
  static JobFlightRecorder ForThisJob();

  /// What to add to the environment of every worker of round `round` (an elastic job's restarts each get
  /// a folder of their own, <dir>/round<N>, so that a round's verdict reads only its own files).
  std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int round) const;

  /// After round `round` failed: prints the verdict on stderr, each line starting with `prefix`
  /// ("launch: "), and where the files are. `ranks_here`: this node's ranks; with several nodes the
  /// others' files are on their machines (unless the directory is shared), and they are not blamed here.
  void ReportFailedRound(int round, const std::string& prefix, const std::vector<int>& ranks_here) const;

  /// After the job: removes a directory made here if the job succeeded.
  void Finish(bool job_succeeded) const;

  std::string RoundDir(int round) const;

 private:
  std::string dir_;
  bool made_here_ = false;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_JOB_FLIGHT_RECORDER_H_
