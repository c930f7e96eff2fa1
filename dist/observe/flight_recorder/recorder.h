// FlightRecorder: a process group's black box. It remembers the group's last N collectives (sequence
// number, op, dtype, sizes, DDP bucket, and when each was enqueued, started and completed), so that when
// a job hangs or dies the question "which rank is missing, and where?" has an answer instead of a timeout
// that names nobody. PyTorch's TORCH_NCCL_TRACE_BUFFER_SIZE and its analyzer are the model; two things
// are simpler here: it is cheap enough to leave on (a slot write per event, no allocation), and with a
// directory it lives in a file.
//
// Where it lives:
//   * TINYDDP_FLIGHT_RECORDER_DIR set (the launcher sets it for every worker): the ring is a file,
//     <dir>/<group>.rank<R>.ring, mapped into memory and written in place. A rank that is killed
//     (SIGKILL) or frozen (SIGSTOP) cannot write anything, but its ring file still says where it was.
//   * unset: the ring is plain memory, and dumps go to DefaultFlightRecorderDir().
// When it dumps (a JSON file per rank and group, <dir>/<group>.rank<R>.json, written atomically): on the
// group's first failed collective (a timeout, a dead peer, an abort), and on SIGUSR1 (every group of the
// process; installed only when the program has not claimed SIGUSR1 itself), while the job runs on.
// One thread per process serves every recorder: it writes their heartbeats each second (so the analyzer
// can tell a rank still waiting from one that froze or died) and dumps them on SIGUSR1.
// The analyzer (verdict.h, binary flight_recorder_analyze) reads a directory of rings
// and dumps and prints one verdict: which rank did not start which collective.
//
// It is a CollectiveObserver (dist/process_group/collective_observer.h): AttachFlightRecorder(group) gives
// a group one, and the group tells it every call it numbered (Issued), when its backend saw the call begin
// and end (Started, Ended), and its first failure (Failed: dump, and the error says where). DDP's reducer
// names the bucket through CollectiveBucketScope, so neither the group nor this layer knows DDP.
// Thread-safe: the caller's thread, a Gloo worker and an NCCL watchdog record concurrently.
// Programs choose it: ddp_mlp attaches one to its group (a plain InitProcessGroup has none), and the launch
// binary gives its workers the directory and reads it after a failure (job_records.h).
#ifndef TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_RECORDER_H_
#define TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_RECORDER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dist/observe/flight_recorder/record.h"
#include "dist/process_group/collective_observer.h"
#include "dist/process_group/process_group.h"

namespace tinyddp::dist {

/// Collectives (and point-to-point calls: Send, Recv, BatchSendRecv) remembered per group (PyTorch keeps 2000 when asked to). A slot is 456 bytes.
inline constexpr uint32_t kFlightRecorderCapacity = 1024;

class FlightRecorder : public CollectiveObserver {
 public:
  /// `group` names the group in file names ("pg0"); `dir` (empty: memory only) holds the ring file.
  /// Never fails: a ring file that cannot be created is reported on stderr once and memory is used.
  FlightRecorder(std::string group, std::string backend, int rank, int world_size, std::chrono::milliseconds timeout,
                 std::string dir = FlightRecorderDirFromEnvironment(), uint32_t capacity = kFlightRecorderCapacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  /// Collective #seq was numbered by its group (before it runs), in `info.bucket` if DDP's reducer set one.
  void Issued(const CollectiveInfo& info) override;
  /// Collective #seq began running (a worker thread took it; the GPU reached it).
  void Started(int64_t seq) override;
  /// Collective #seq ended with `status` (completed when OK, else failed with its message).
  void Ended(int64_t seq, const absl::Status& status) override;
  /// The group's first failure: dumps (`reason`, `status`) and returns WhereToLook() for the error.
  std::string Failed(absl::string_view reason, const absl::Status& status) override;

  /// Writes the JSON dump (reason: "timeout", "abort", "SIGUSR1", ...; `error`: the failure, if any)
  /// and returns its path, or "" when it could not be written (said on stderr).
  std::string Dump(absl::string_view reason, const absl::Status& error = absl::OkStatus());
  /// Where Dump() writes.
  std::string dump_path() const;
  /// The ring file, or "" when the ring is in memory.
  const std::string& ring_path() const { return ring_path_; }
  /// The records as the analyzer would read them (source "memory").
  RankFlightRecord Snapshot() const;
  /// One sentence for error messages: where the records are and how to get the verdict.
  std::string WhereToLook() const;
  /// Writes the ring's heartbeat (the process's thread for recorders calls it every second).
  void Heartbeat();

  const std::string& group() const { return group_; }

 private:
  // Issued writes the next slot in turn (collectives and point-to-point calls, numbered apart, share the
  // ring); Started and Ended look back from the newest for #seq's slot: null once overwritten.
  RingSlot* SlotOf(int64_t seq) const;

  const std::string group_;
  const int rank_;
  std::string dir_;        // ring file and dumps ("" before a dump: DefaultFlightRecorderDir())
  std::string ring_path_;
  uint32_t capacity_ = 0;
  void* mapping_ = nullptr;  // header + slots: a shared file mapping, or anonymous memory
  size_t mapping_bytes_ = 0;
  uint64_t issued_ = 0;  // calls written into the ring so far
  RingHeader* header_ = nullptr;
  RingSlot* slots_ = nullptr;
  mutable std::mutex mu_;  // one writer at a time; readers in other processes read racily (see record.h)
};

/// Gives `group` a flight recorder (ring in $TINYDDP_FLIGHT_RECORDER_DIR, else in memory) and returns it;
/// the group keeps it alive. Call once, right after creating the group, before its first collective.
std::shared_ptr<FlightRecorder> AttachFlightRecorder(ProcessGroup& group);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_RECORDER_H_
