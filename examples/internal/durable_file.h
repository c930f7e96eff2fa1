// Small POSIX file helpers with the guarantees checkpoints need: whole-file reads and writes that report
// every failing call as an absl::Status naming the path, fsync of files and of folders (a rename is
// only durable once the folder holding it is fsynced), a CRC-32 to detect damaged files, and the
// difference between a write that may succeed if tried again and one that cannot (a full disk, a
// read-only folder). Used by train_checkpoint.cc, startup_checks.cc and metrics_writer.cc.
//
// Every read has an end: ReadWholeFile refuses anything but a regular file before it opens it (a FIFO
// would block the reader until someone writes into it, a character device may never end).
#ifndef TINYDDP_EXAMPLES_INTERNAL_DURABLE_FILE_H_
#define TINYDDP_EXAMPLES_INTERNAL_DURABLE_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dist/elastic/job_observer.h"

namespace tinyddp::examples {

/// The whole file. NotFound when it does not exist; FailedPrecondition, at once, when it is not a
/// regular file ("... is a FIFO (named pipe), not a regular file"); Internal naming the call otherwise.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

/// Creates or truncates `path`, writes `bytes`, fsyncs and closes it. Not atomic by itself: write to a
/// temporary name and rename for that (WriteFileAtomically).
absl::Status WriteFileDurably(const std::string& path, absl::string_view bytes);

/// WriteFileDurably to "<path>.tmp-<pid>", rename over `path`, fsync the folder: afterwards `path` holds
/// either its old contents or all of `bytes`, even across a crash.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);

/// fsyncs a folder, making renames and creations inside it durable.
absl::Status FsyncDirectory(const std::string& path);

/// zlib's CRC-32 of `bytes` (the checksum of gzip and PNG).
uint32_t Crc32(absl::string_view bytes);

// --- Permanent failures -------------------------------------------------------------------------------
// Most failures of a worker are worth a restart (launch/spawn --max_restarts): a peer died, a network
// blipped. Some are not: a checkpoint folder on a full disk or a read-only file system fails the same way
// after the restart, and every restart first redoes the work since the last checkpoint. Such a failure is
// marked permanent (a payload on the Status, so it survives being passed up through the collective
// steps), and the worker exits with kPermanentFailureExitCode, which tells its launcher not to restart it.

/// The exit status of a worker whose failure a restart cannot fix: dist/elastic/job_observer.h's, which the
/// launcher and spawn know. 73 is sysexits.h's EX_CANTCREAT ("a (user specified) output file cannot be
/// created"), distinct from 1 (an error), 2 (a bad command line), 3 (the NCCL watchdog) and 128 + N (signal N).
using dist::kPermanentFailureExitCode;

/// `status` (not OK) marked as permanent.
absl::Status MarkPermanent(absl::Status status);
/// Whether `status` was marked by MarkPermanent.
bool IsPermanent(const absl::Status& status);

/// Why writing `bytes_needed` bytes into the folder `dir` cannot succeed however often it is tried, or ""
/// when it might: its file system is read-only, this process may not write there, or the file system
/// has fewer than `bytes_needed` bytes (or no inodes) free. Asked after a write failed, to tell a full
/// disk from an I/O error that may pass.
std::string PermanentWriteProblem(const std::string& dir, uint64_t bytes_needed);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_DURABLE_FILE_H_
