// The flight recorder's records, as they sit in memory, in a rank's ring file and in its JSON dump: what
// the recorder (recorder.h) writes and the analyzer (verdict.h) reads. Kept apart from both so that the
// analyzer, which the launch binary links (job_records.h), needs no process group.
//
// One FlightEntry per collective a group issued, found by its sequence number (ProcessGroup numbers
// every call, and rank r's collective #n is matched with every other rank's #n). Its state only moves
// forward: enqueued (the call returned its Work) -> started (a host thread or the GPU began it) ->
// completed or failed. Times are wall-clock microseconds since the epoch (0: not yet), so that ranks on
// different machines can be compared roughly; the analyzer never needs them to agree.
//
// The ring file (<dir>/<group>.rank<R>.ring) is a RingHeader followed by `capacity` RingSlots, written in
// place through a shared mapping: it survives its process (SIGKILL) and can be read while the process
// is frozen (SIGSTOP), which is exactly when a dump cannot be written. Plain structs of fixed size, so the
// file is the memory; the magic, version and sizes in the header guard against reading another layout.
// The header also says whether its process still lives: its pid and machine (the kernel's boot id), and a
// heartbeat the process writes every second, which stops when it dies or freezes.
#ifndef TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_RECORD_H_
#define TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// The directory every rank of a job writes its ring file and dumps to (the launcher sets it).
inline constexpr char kFlightRecorderDirEnv[] = "TINYDDP_FLIGHT_RECORDER_DIR";

/// Where a collective got to on one rank. The numbers are stored in ring files: append only.
enum class FlightState : int32_t { kEmpty = 0, kEnqueued = 1, kStarted = 2, kCompleted = 3, kFailed = 4 };

/// "empty", "enqueued", "started", "completed", "failed".
const char* FlightStateName(FlightState state);

/// One collective as one rank saw it.
struct FlightEntry {
  int64_t seq = -1;
  FlightState state = FlightState::kEmpty;
  std::string op;         // "AllReduce", "Broadcast", ...
  std::string signature;  // its arguments as in Work descriptions: "float32 [1000], SUM"
  std::string dtype;      // "float32"
  std::string via;        // the path of an external all_reduce ("copy engines"); empty for the backend's own
  int64_t numel = 0;      // elements this rank contributes
  int64_t bytes = 0;
  int bucket = -1;        // DDP's bucket index when the reducer issued it (CollectiveBucketScope), else -1
  int64_t enqueued_us = 0, started_us = 0, completed_us = 0;
  std::string error;      // the failure, for kFailed (shortened)

  /// "AllReduce(float32 [1000], SUM)": what every rank must agree on at this sequence number.
  std::string Fingerprint() const;
};

/// Everything one rank left behind for one process group.
struct RankFlightRecord {
  std::string group;      // "pg0": the n-th group this process created (the same n on every rank)
  std::string backend;    // "gloo", "nccl"
  int rank = -1;
  int world_size = 0;
  int pid = 0;
  int64_t timeout_ms = 0;
  std::string source;     // "dump" (a JSON file the rank wrote) or "ring" (its live ring file)
  std::string path;       // the file it was read from
  std::string reason;     // why it dumped ("timeout", "SIGUSR1", ...); empty for a ring
  std::string error;      // the failure that made it dump, if any
  int64_t written_us = 0; // when the dump was written, or the ring last changed
  std::string boot_id;    // the machine it ran on (/proc/sys/kernel/random/boot_id); empty if unknown
  int64_t heartbeat_us = 0;  // the last sign of life (the ring's heartbeat, or the dump's time)
  std::vector<FlightEntry> entries;  // ascending seq, oldest first
};

// --- The ring file's layout ----------------------------------------------------------------------------

inline constexpr char kRingMagic[8] = {'T', 'D', 'D', 'P', 'F', 'R', 'E', 'C'};
inline constexpr uint32_t kRingVersion = 2;

struct RingHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(RingHeader)
  uint32_t slot_bytes;    // sizeof(RingSlot)
  uint32_t capacity;      // slots after the header
  int32_t rank;
  int32_t world_size;
  int32_t pid;
  int32_t reserved;
  int64_t timeout_ms;
  int64_t created_us;
  int64_t updated_us;     // the last write to any slot
  char group[32];
  char backend[16];
  char boot_id[40];
  int64_t heartbeat_us;   // written every second by a thread of the process (flight_recorder.cc)
};

/// One slot; the recorder fills them in turn (collectives and point-to-point calls alike), so a call lives
/// in its slot until `capacity` later calls have been issued.
struct RingSlot {
  int64_t seq;            // -1: never used
  int32_t state;          // FlightState
  int32_t bucket;
  int64_t numel;
  int64_t bytes;
  int64_t enqueued_us;
  int64_t started_us;
  int64_t completed_us;
  char op[24];
  char dtype[16];
  char via[24];
  char signature[136];
  char error[200];
};

/// Copies `text` into a fixed field, cut to fit and always NUL-terminated.
void CopyToField(absl::string_view text, char* field, size_t size);
/// The text of a fixed field (up to its first NUL).
std::string FieldText(const char* field, size_t size);

FlightEntry EntryFromSlot(const RingSlot& slot);

// --- Files ---------------------------------------------------------------------------------------------

/// This machine's boot id (changes with every boot; equal for every process of one running kernel,
/// network namespaces included), or "" when unreadable.
std::string ThisBootId();

/// $TINYDDP_FLIGHT_RECORDER_DIR, or "" when unset.
std::string FlightRecorderDirFromEnvironment();
/// Where dumps go without TINYDDP_FLIGHT_RECORDER_DIR: $TMPDIR/tinyddp-flight-recorder (or /tmp/...).
std::string DefaultFlightRecorderDir();

/// "<dir>/<group>.rank<rank>.ring" and ".json".
std::string RingFilePath(absl::string_view dir, absl::string_view group, int rank);
std::string DumpFilePath(absl::string_view dir, absl::string_view group, int rank);

/// The JSON a dump file holds (one object; see ReadFlightDump for its fields).
std::string FlightRecordToJson(const RankFlightRecord& record);
/// Parses a dump written by FlightRecordToJson. InvalidArgument naming the file and what is wrong.
absl::StatusOr<RankFlightRecord> ParseFlightDump(absl::string_view json, const std::string& path);
absl::StatusOr<RankFlightRecord> ReadFlightDump(const std::string& path);
/// Reads a ring file (of a live, frozen or dead process) into a record with source "ring". DataLoss for
/// a file of another layout or version; the slots torn by a write in progress are left out.
absl::StatusOr<RankFlightRecord> ReadFlightRing(const std::string& path);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_FLIGHT_RECORDER_RECORD_H_
