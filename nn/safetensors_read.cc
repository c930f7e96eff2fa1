// Reading safetensors files (nn/safetensors.h). The header is untrusted input: it is parsed and checked
// completely (types, dtypes, overflow, byte ranges tiling the data section) before any tensor is
// allocated, and data is only ever read inside ranges proven to lie within the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "nn/safetensors.h"
#include "tensor/tensor.h"

namespace tinyddp::nn {
namespace {

using nlohmann::json;

// One validated header entry.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries;  // sorted by data offset
  StringMap metadata;
};

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file ", source, ": ", what));
}

// "not a regular file (a FIFO)": what the path is instead.
std::string NotARegularFile(mode_t mode) {
  const char* what = "something else";
  if (S_ISFIFO(mode)) what = "a FIFO";
  if (S_ISDIR(mode)) what = "a folder";
  if (S_ISCHR(mode)) what = "a character device";
  if (S_ISBLK(mode)) what = "a block device";
  if (S_ISSOCK(mode)) what = "a socket";
  return absl::StrCat("not a regular file (", what, ")");
}

// A JSON value for a message, cut short: a corrupt header may hold megabytes in one entry.
std::string Short(const json& v) {
  std::string s = v.dump();
  if (s.size() > 120) s = s.substr(0, 120) + "...";
  return s;
}

// A JSON value that must be a non-negative integer representable as uint64 (nlohmann stores
// non-negative integer literals as number_unsigned; negatives, fractions and huge values are not).
bool AsUnsigned(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

absl::StatusOr<Entry> ParseEntry(const std::string& name, const json& v, absl::string_view source) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!v.is_object()) return Invalid(source, absl::StrCat(where, ": entry is not a JSON object"));
  if (v.size() != 3 || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
    return Invalid(source, absl::StrCat(where, ": entry must have exactly the keys dtype, shape, data_offsets, got ",
                                        Short(v)));
  }
  Entry e;
  e.name = name;
  if (!v["dtype"].is_string()) return Invalid(source, absl::StrCat(where, ": dtype is not a string"));
  absl::StatusOr<DType> dtype = ParseSafetensorsDType(v["dtype"].get<std::string>());
  if (!dtype.ok()) return Invalid(source, absl::StrCat(where, ": ", dtype.status().message()));
  e.dtype = *dtype;

  const json& shape = v["shape"];
  if (!shape.is_array()) return Invalid(source, absl::StrCat(where, ": shape is not an array"));
  // The element count stays below 2^59, so neither it nor the byte size (at most 8 bytes an element)
  // can overflow; far larger than any file, so no real tensor is refused.
  constexpr uint64_t kLimit = uint64_t{1} << 59;
  uint64_t numel = 1;
  for (const json& d : shape) {
    uint64_t size;
    if (!AsUnsigned(d, &size)) {
      return Invalid(source, absl::StrCat(where, ": shape ", Short(shape), " has a size that is not a non-negative integer"));
    }
    if (size >= kLimit || (size != 0 && numel > kLimit / size)) {
      return Invalid(source, absl::StrCat(where, ": shape ", Short(shape), " has more elements than can exist"));
    }
    numel *= size;
    e.shape.push_back(static_cast<int64_t>(size));
  }
  const uint64_t nbytes = numel * DTypeSize(e.dtype);  // < 2^62: no overflow

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !AsUnsigned(offsets[0], &e.begin) ||
      !AsUnsigned(offsets[1], &e.end)) {
    return Invalid(source, absl::StrCat(where, ": data_offsets must be [begin, end] with non-negative integers, got ",
                                        Short(offsets)));
  }
  if (e.end < e.begin || e.end - e.begin != nbytes) {
    return Invalid(source, absl::StrCat(where, ": data_offsets [", e.begin, ", ", e.end, "] do not hold ",
                                        v["dtype"].get<std::string>(), " ", Short(shape), ", which is ", nbytes,
                                        " bytes"));
  }
  return e;
}

// Parses and validates the header against the size of the data section that follows it.
absl::StatusOr<Header> ParseHeader(absl::string_view text, uint64_t data_size, absl::string_view source) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Invalid(source, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) return Invalid(source, "header is not a JSON object");
  Header header;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Invalid(source, "__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return Invalid(source, absl::StrCat("__metadata__ value of '", mk, "' is not a string"));
        header.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    absl::StatusOr<Entry> entry = ParseEntry(key, value, source);
    RETURN_IF_ERROR(entry);
    header.entries.push_back(*std::move(entry));
  }
  // The byte ranges must tile [0, data_size) exactly: sorted by offset, each starts where the last ended.
  std::sort(header.entries.begin(), header.entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t expected = 0;
  for (const Entry& e : header.entries) {
    if (e.begin != expected) {
      return Invalid(source, absl::StrCat("tensor '", e.name, "' starts at byte ", e.begin, " of the data section, but ",
                                          e.begin < expected ? "that overlaps the previous tensor, which ends at "
                                                             : "the previous tensor ends at ",
                                          expected, " (tensors must be contiguous)"));
    }
    expected = e.end;
  }
  if (expected != data_size) {
    return Invalid(source, absl::StrCat("the tensors cover ", expected, " bytes but the data section has ", data_size,
                                        expected > data_size ? " (the file is truncated)" : " (trailing bytes)"));
  }
  return header;
}

// The header length from the first 8 bytes, checked against the limit and the file size.
absl::StatusOr<uint64_t> HeaderLength(const unsigned char prefix[8], uint64_t file_size, absl::string_view source) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kMaxSafetensorsHeaderBytes) {
    return Invalid(source, absl::StrCat("header length ", n, " exceeds the limit of ", kMaxSafetensorsHeaderBytes,
                                        " bytes (corrupt file?)"));
  }
  if (n > file_size - 8) {
    return Invalid(source, absl::StrCat("header length ", n, " runs past the end of the file (", file_size, " bytes)"));
  }
  return n;
}

absl::Status ReadAt(int fd, void* dst, uint64_t size, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: reading ", path));
    if (n == 0) return Invalid(path, "file ended early (was it truncated while being read?)");
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  if (name == "F32") return DType::kFloat32;
  if (name == "F64") return DType::kFloat64;
  if (name == "BF16") return DType::kBFloat16;
  if (name == "I32") return DType::kInt32;
  if (name == "I64") return DType::kInt64;
  if (name == "U8") return DType::kUInt8;
  for (const char* other : {"BOOL", "I8", "I16", "U16", "U32", "U64", "F16", "F8_E5M2", "F8_E4M3"}) {
    if (name == other) {
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", name, " is valid safetensors but unsupported (tinyddp reads F32, F64, BF16, I32, I64, U8)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes, absl::string_view source) {
  if (bytes.size() < 8) {
    return Invalid(source, absl::StrCat("only ", bytes.size(), " bytes, shorter than the 8-byte header length"));
  }
  absl::StatusOr<uint64_t> n = HeaderLength(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), source);
  RETURN_IF_ERROR(n);
  const absl::string_view data = bytes.substr(8 + *n);
  absl::StatusOr<Header> header = ParseHeader(bytes.substr(8, *n), data.size(), source);
  RETURN_IF_ERROR(header);
  SafetensorsContents contents;
  contents.metadata = std::move(header->metadata);
  for (const Entry& e : header->entries) {
    Tensor t = Tensor::Empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data.data() + e.begin, e.end - e.begin);
    contents.tensors[e.name] = std::move(t);
  }
  return contents;
}

absl::StatusOr<SafetensorsContents> LoadSafetensors(const std::string& path) {
  // A FIFO (or a device) is refused before it is opened: opening a FIFO waits for a writer, forever.
  // O_NONBLOCK and the second look after opening cover a file replaced by one in between.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: opening ", path));
  if (!S_ISREG(st.st_mode)) return Invalid(path, NotARegularFile(st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: opening ", path));
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: stat of ", path));
  if (!S_ISREG(st.st_mode)) return Invalid(path, NotARegularFile(st.st_mode));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) return Invalid(path, absl::StrCat("only ", file_size, " bytes, shorter than the 8-byte header length"));

  unsigned char prefix[8];
  RETURN_IF_ERROR(ReadAt(fd, prefix, 8, 0, path));
  absl::StatusOr<uint64_t> n = HeaderLength(prefix, file_size, path);
  RETURN_IF_ERROR(n);
  std::string text(*n, '\0');
  RETURN_IF_ERROR(ReadAt(fd, text.data(), *n, 8, path));
  absl::StatusOr<Header> header = ParseHeader(text, file_size - 8 - *n, path);
  RETURN_IF_ERROR(header);

  SafetensorsContents contents;
  contents.metadata = std::move(header->metadata);
  const uint64_t data_start = 8 + *n;
  for (const Entry& e : header->entries) {
    Tensor t = Tensor::Empty(e.shape, e.dtype);
    RETURN_IF_ERROR(ReadAt(fd, t.data_ptr(), e.end - e.begin, data_start + e.begin, path));
    contents.tensors[e.name] = std::move(t);
  }
  return contents;
}

}  // namespace tinyddp::nn
