// Whole-file reads and gzip inflating for the dataset readers. A file that starts with the gzip magic bytes
// 1f 8b is compressed, whatever its name, so "train-images-idx3-ubyte" and "train-images-idx3-ubyte.gz" read
// the same. Inflating is bounded: a few kilobytes of gzip can inflate to gigabytes (a "gzip bomb", or a
// damaged file), so the caller says how much it expects and no more is inflated. Internal to data/ (used by
// idx.cc, which knows from a file's header how large it is).
#ifndef TINYDDP_DATA_INTERNAL_FILE_CONTENTS_H_
#define TINYDDP_DATA_INTERNAL_FILE_CONTENTS_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::data::internal {

/// The bytes of `path` as stored (compressed or not). Errors name the path: NotFound when it does not exist.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);

/// Inflates a complete gzip stream (one or more concatenated members) that holds at most `max_bytes`;
/// `name` appears in errors. DataLoss for a truncated or corrupt stream (bad CRC, cut-off member, trailing
/// junk); OutOfRange as soon as it holds more than `max_bytes`, having inflated only max_bytes + 1 of them.
absl::StatusOr<std::string> Gunzip(const std::string& compressed, const std::string& name, size_t max_bytes);

/// The first `n` inflated bytes of a gzip stream (all of them when it holds fewer); the rest is neither
/// inflated nor checked.
absl::StatusOr<std::string> GunzipPrefix(const std::string& compressed, const std::string& name, size_t n);

/// True when `bytes` starts with the gzip magic number 0x1f 0x8b.
bool LooksGzipped(const std::string& bytes);

}  // namespace tinyddp::data::internal

#endif  // TINYDDP_DATA_INTERNAL_FILE_CONTENTS_H_
