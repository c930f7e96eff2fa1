// Whole-file reads and bounded gzip inflating, on plain stdio and zlib's inflate.
#include "data/internal/file_contents.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace tinyddp::data::internal {
namespace {

absl::Status ErrnoError(int err, const std::string& path, const char* doing) {
  const std::string message = absl::StrCat(path, ": cannot ", doing, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

// gzip stores the uncompressed size modulo 2^32 in the last four bytes (little-endian). Only a hint
// for the first allocation: a corrupt trailer must not make us allocate gigabytes, so it is capped.
size_t SizeHint(const std::string& compressed) {
  if (compressed.size() < 18) return 1 << 16;
  const auto* p = reinterpret_cast<const unsigned char*>(compressed.data() + compressed.size() - 4);
  const size_t isize = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<size_t>(p[3]) << 24);
  return std::clamp<size_t>(isize, 1 << 16, 64 * compressed.size() + (1 << 20));
}

// Inflates into at most `max_bytes` + 1 bytes. `prefix_only`: the first max_bytes are all the caller wants,
// so it stops there quietly; else one byte more is OutOfRange.
absl::StatusOr<std::string> Inflate(const std::string& compressed, const std::string& name, size_t max_bytes,
                                    bool prefix_only) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip wrapper (header, CRC-32 and size trailer), which inflate verifies.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return absl::ResourceExhaustedError(absl::StrCat(name, ": zlib could not initialise inflate"));
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  const size_t room = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;  // one byte more tells "more"
  std::string out(std::min(SizeHint(compressed), room), '\0');
  size_t produced = 0;
  size_t consumed = 0;
  while (produced <= max_bytes) {
    if (produced == out.size()) out.resize(std::min(out.size() * 2, room));
    // avail_in/avail_out are 32-bit: feed at most 1 GiB at a time.
    const size_t in_chunk = std::min<size_t>(compressed.size() - consumed, 1u << 30);
    const size_t out_chunk = std::min<size_t>(out.size() - produced, 1u << 30);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data() + consumed));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    consumed += in_chunk - zs.avail_in;
    produced += out_chunk - zs.avail_out;
    if (ret == Z_STREAM_END) {
      if (consumed == compressed.size()) break;
      // Another gzip member may follow (`cat a.gz b.gz` is a valid gzip file); anything else is junk.
      if (!LooksGzipped(compressed.substr(consumed, 2))) {
        return absl::DataLossError(absl::StrCat(name, ": ", compressed.size() - consumed,
                                                " bytes of junk after the end of the gzip stream"));
      }
      inflateReset(&zs);
      continue;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && consumed == compressed.size()) {
      return absl::DataLossError(absl::StrCat(name, ": gzip stream ends early after ", compressed.size(),
                                              " compressed bytes (truncated file?)"));
    }
    if (ret == Z_BUF_ERROR && produced == out.size()) continue;  // output full: grow and go on
    if (ret == Z_MEM_ERROR) return absl::ResourceExhaustedError(absl::StrCat(name, ": out of memory inflating"));
    return absl::DataLossError(
        absl::StrCat(name, ": corrupt gzip data (zlib: ", zs.msg != nullptr ? zs.msg : "error", ")"));
  }
  if (produced > max_bytes && !prefix_only) {
    return absl::OutOfRangeError(absl::StrCat(name, ": the gzip stream inflates to more than ", max_bytes, " bytes"));
  }
  out.resize(std::min(produced, max_bytes));
  return out;
}

}  // namespace

bool LooksGzipped(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

absl::StatusOr<std::string> Gunzip(const std::string& compressed, const std::string& name, size_t max_bytes) {
  return Inflate(compressed, name, max_bytes, /*prefix_only=*/false);
}

absl::StatusOr<std::string> GunzipPrefix(const std::string& compressed, const std::string& name, size_t n) {
  return Inflate(compressed, name, n, /*prefix_only=*/true);
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (f == nullptr) return ErrnoError(errno, path, "open");
  std::string bytes;
  if (std::fseek(f.get(), 0, SEEK_END) == 0) {
    const long size = std::ftell(f.get());
    if (size > 0) bytes.reserve(size);
    std::rewind(f.get());
  }
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f.get())) > 0) bytes.append(buffer, n);
  if (std::ferror(f.get())) return ErrnoError(errno, path, "read");
  return bytes;
}

}  // namespace tinyddp::data::internal
