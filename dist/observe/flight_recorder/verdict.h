// The flight recorder's analyzer: reads what every rank left in a directory (ring files and JSON dumps,
// record.h) and says in one line where the job stopped and whose fault it was:
//
//   collective #1091 AllReduce(float32 [262144], AVG) (bucket 0, 1.0 MiB): ranks {1} never started it;
//   rank 1's last completed collective is #1090
//   ranks disagree at #12: rank 0 AllReduce(float32 [10], SUM) vs rank 1 Broadcast(float32 [10], root=0)
//
// It matches collectives across ranks by sequence number, the way the process groups do: the first
// sequence number whose fingerprints differ is a disagreement (a rank skipped or reordered a call);
// otherwise the oldest collective some rank has not finished is where the job stopped, and the ranks that
// did not start it are the ones the others waited for. A rank with no record at all is named too.
// A pure function of files: the launch binary runs it after a failed round (job_records.h; it links no
// process group), and flight_recorder_analyze runs it by hand.
#ifndef TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_VERDICT_H_
#define TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_VERDICT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/observe/flight_recorder/record.h"

namespace tinyddp::dist {

/// The judgement on one process group.
struct FlightVerdict {
  std::string group;                 // "pg0"
  std::string verdict;               // one line, as in the header comment
  std::vector<int> culprits;         // the ranks the verdict blames (empty when nobody is to blame)
  std::vector<std::string> details;  // one line per rank: where it was
  std::vector<std::string> notes;    // files skipped and why
  bool none_pending = false;         // every rank with a record completed all it issued: not a collective's failure
};

/// Whether a rank's process still runs, as seen from here at `now_us`: on this machine (same boot id) from
/// /proc (running, stopped by SIGSTOP, or gone); on another, from its heartbeat (silent for more than
/// kHeartbeatSilence: gone or frozen).
enum class Liveness { kAlive, kStopped, kGone, kUnknown };
inline constexpr int64_t kHeartbeatSilenceUs = 5'000'000;
Liveness LivenessOf(const RankFlightRecord& record, int64_t now_us);

/// Judges one group from its ranks' records (any order; at most one per rank; the world size is the
/// newest record's). `ranks_here`: the ranks whose files should be here (one node's, when each machine
/// keeps its own directory); a rank outside it without a record is not blamed, only said to be
/// elsewhere. Empty: every rank's. A rank that started the collective and recorded no end is blamed only
/// if its process is gone or frozen (LivenessOf at `now_us`; 0: now); alive, it is still waiting in it.
/// Pure but for LivenessOf: the tests feed it records directly.
FlightVerdict JudgeFlightRecords(const std::vector<RankFlightRecord>& records, const std::vector<int>& ranks_here = {},
                                 int64_t now_us = 0);

/// Reads every *.ring and *.json in `dir` and judges each group found. For a rank with both, the ring
/// gives the collectives (it is the newest) and the dump the reason and error. NotFound when `dir` holds
/// no records (e.g. the job never created a process group, or the directory is not the job's).
absl::StatusOr<std::vector<FlightVerdict>> AnalyzeFlightRecorderDir(const std::string& dir,
                                                                    const std::vector<int>& ranks_here = {});

/// The verdicts as the launcher and flight_recorder_analyze print them: for each group its verdict, then
/// the details indented, each line starting with `prefix`.
std::string FormatFlightVerdicts(const std::vector<FlightVerdict>& verdicts, const std::string& prefix = "");

/// "512 B", "4.0 KiB", "1.0 MiB", "2.5 GiB".
std::string HumanBytes(int64_t bytes);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_VERDICT_H_
