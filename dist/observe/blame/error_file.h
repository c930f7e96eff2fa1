// Error files: how a worker tells its launcher why it failed, so that the launcher's blame (blame.h) can
// name the rank whose failure started it all rather than the first one it saw exit (torchelastic's
// TORCHELASTIC_ERROR_FILE and @record, in C++). The worker's side of the blame wing.
//
// The launcher gives every worker a file to write (TINYDDP_ERROR_FILE), and a worker that fails writes
// one line of JSON there before exiting with an error:
//
//   {"rank": 1, "kind": "error", "message": "...", "time_us": 1767225600123456}
//
// The kind says whether the failure was the rank's own ("error"), a wait that ran out ("timeout": some
// other rank never arrived), or a reaction to another rank's failure ("peer": a closed connection, or
// "another rank failed"); it comes from the Status code (FailureKindOf). A worker that writes none (a
// crash, SIGKILL, a program that does not call RecordWorkerFailure) is judged by how and when it exited.
#ifndef TINYDDP_DIST_OBSERVE_BLAME_ERROR_FILE_H_
#define TINYDDP_DIST_OBSERVE_BLAME_ERROR_FILE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace tinyddp::dist {

inline constexpr char kErrorFileEnv[] = "TINYDDP_ERROR_FILE";

/// In the order blame ranks them: an own failure beats a timeout, which beats giving way.
enum class FailureKind {
  kError,    // the rank's own failure: bad input, a crash it caught, a non-finite loss it saw first
  kTimeout,  // a wait ran out (DeadlineExceeded): the rank it waited for is the suspect
  kPeer,     // it stopped because another rank failed (Unavailable, Aborted, Cancelled)
};
/// "error", "timeout", "peer".
const char* FailureKindName(FailureKind kind);

/// The kind a worker's final Status reports (see FailureKind).
FailureKind FailureKindOf(const absl::Status& status);

struct WorkerFailure {
  int rank = -1;
  FailureKind kind = FailureKind::kError;
  std::string message;
  int64_t time_us = 0;  // wall clock (microseconds since the epoch) when it was written
};

/// Writes `status` (not OK) as this worker's failure to $TINYDDP_ERROR_FILE, atomically; does nothing
/// when the variable is unset (no blame is attached) or the status is OK. Errors writing are ignored:
/// the worker is already on its way out, and its exit code still tells.
/// Call it right before exiting: it also ignores SIGTERM from then on, so that the SIGTERM the
/// launcher sends the others does not cut short this rank's own exit (and replace its exit code);
/// the launcher's SIGKILL after the grace period still ends a rank that does not exit.
void RecordWorkerFailure(int rank, const absl::Status& status);

/// Reads an error file; nullopt when it is absent or unreadable.
std::optional<WorkerFailure> ReadWorkerFailure(const std::string& path);

/// The first line of `message`, cut to `max_chars` with "...": for one-line summaries.
std::string FirstLine(const std::string& message, size_t max_chars = 300);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_BLAME_ERROR_FILE_H_
