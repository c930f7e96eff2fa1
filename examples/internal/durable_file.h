// Small POSIX file helpers with the guarantees checkpoints need: whole-file reads and writes that report
// every failing call as an absl::Status naming the path, fsync of files and of folders (a rename is
// only durable once the folder holding it is fsynced), and a CRC-32 to detect damaged files.
// Used by train_checkpoint.cc and metrics_writer.cc.
#ifndef TINYDDP_EXAMPLES_INTERNAL_DURABLE_FILE_H_
#define TINYDDP_EXAMPLES_INTERNAL_DURABLE_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp::examples {

/// The whole file. NotFound when it does not exist; Internal naming the call otherwise.
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

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_DURABLE_FILE_H_
