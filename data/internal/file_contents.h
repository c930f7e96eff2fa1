// Whole-file reads for the dataset readers, with transparent gzip: a file that starts with the gzip
// magic bytes 1f 8b is inflated (zlib), whatever its name, so "train-images-idx3-ubyte" and
// "train-images-idx3-ubyte.gz" read the same. Internal to data/ (used by idx.cc).
#ifndef TINYDDP_DATA_INTERNAL_FILE_CONTENTS_H_
#define TINYDDP_DATA_INTERNAL_FILE_CONTENTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::data::internal {

/// The bytes of `path`, inflated if gzip-compressed. Errors name the path: NotFound when it does not
/// exist, DataLoss for a truncated or corrupt gzip stream (bad CRC, cut-off member, trailing junk).
absl::StatusOr<std::string> ReadFileContents(const std::string& path);

/// Inflates a complete gzip stream (one or more concatenated members); `name` appears in errors.
absl::StatusOr<std::string> Gunzip(const std::string& compressed, const std::string& name);

/// True when `bytes` starts with the gzip magic number 0x1f 0x8b.
bool LooksGzipped(const std::string& bytes);

}  // namespace tinyddp::data::internal

#endif  // TINYDDP_DATA_INTERNAL_FILE_CONTENTS_H_
