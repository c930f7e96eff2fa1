// Writing safetensors files (nn/safetensors.h): the header exactly as the reference library lays it
// out, then the data, into a temporary file that is renamed into place once it is safely on disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "nn/safetensors.h"

namespace tinyddp::nn {
namespace {

// The reference library orders its dtype enum by alignment and writes larger-aligned tensors first, so
// every tensor's data is aligned within the file; ties are broken by name.
int AlignmentRank(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return 0;
    case DType::kBFloat16: return 1;
    case DType::kInt32: return 2;
    case DType::kFloat32: return 3;
    case DType::kFloat64: return 4;
    case DType::kInt64: return 5;
  }
  return 0;
}

// What gets written: the header bytes (length prefix included) and the tensors in file order.
struct Layout {
  std::string header;
  std::vector<Tensor> tensors;
};

absl::StatusOr<Layout> PlanLayout(const TensorMap& tensors, const StringMap& metadata) {
  std::vector<std::pair<std::string, Tensor>> order(tensors.begin(), tensors.end());
  for (const auto& [name, t] : order) {
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", name, "' is undefined"));
    if (name == "__metadata__") {
      return absl::InvalidArgumentError("safetensors: '__metadata__' is reserved and cannot name a tensor");
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return AlignmentRank(a.second.dtype()) > AlignmentRank(b.second.dtype());  // names already sorted
  });

  // ordered_json keeps insertion order, which is the file's data order (as the reference writes it).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  Layout layout;
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    nlohmann::ordered_json entry;
    entry["dtype"] = SafetensorsDTypeName(t.dtype());
    entry["shape"] = std::vector<int64_t>(t.shape().begin(), t.shape().end());
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    offset += t.nbytes();
    header[name] = std::move(entry);
    layout.tensors.push_back(t);
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not valid UTF-8
    return absl::InvalidArgumentError(absl::StrCat("safetensors: cannot encode the header: ", e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // so the data section starts 8-byte aligned
  const uint64_t n = json.size();
  layout.header.resize(8);
  for (int i = 0; i < 8; ++i) layout.header[i] = static_cast<char>((n >> (8 * i)) & 0xff);  // little-endian
  layout.header += json;
  return layout;
}

// The tensor's bytes on the host (a copy for GPU tensors).
Tensor OnHost(const Tensor& t) { return t.device().is_cpu() ? t : t.To(Device::CPU()); }

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: writing ", path));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kBFloat16: return "BF16";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kUInt8: return "U8";
  }
  return "?";
}

absl::StatusOr<std::string> SerializeSafetensors(const TensorMap& tensors, const StringMap& metadata) {
  absl::StatusOr<Layout> layout = PlanLayout(tensors, metadata);
  RETURN_IF_ERROR(layout);
  std::string bytes = std::move(layout->header);
  for (const Tensor& t : layout->tensors) {
    const Tensor host = OnHost(t);
    bytes.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  return bytes;
}

absl::Status SaveSafetensors(const std::string& path, const TensorMap& tensors, const StringMap& metadata) {
  absl::StatusOr<Layout> layout = PlanLayout(tensors, metadata);
  if (!layout.ok()) return absl::Status(layout.status().code(), absl::StrCat(path, ": ", layout.status().message()));

  // The temporary file lives beside the target: rename() is atomic only within one file system.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: creating a temporary file for ", path));
  bool renamed = false;
  absl::Cleanup remove_tmp = [&] {
    if (!renamed) ::unlink(tmp.c_str());
  };
  absl::Status status = WriteAll(fd, layout->header.data(), layout->header.size(), tmp);
  for (size_t i = 0; i < layout->tensors.size() && status.ok(); ++i) {
    const Tensor host = OnHost(layout->tensors[i]);
    status = WriteAll(fd, host.data_ptr(), host.nbytes(), tmp);
  }
  // mkstemp creates the file 0600; a checkpoint should be readable like any file the user writes.
  if (status.ok() && ::fchmod(fd, 0644) != 0) status = absl::ErrnoToStatus(errno, absl::StrCat("fchmod ", tmp));
  if (status.ok() && ::fsync(fd) != 0) status = absl::ErrnoToStatus(errno, absl::StrCat("fsync ", tmp));
  if (::close(fd) != 0 && status.ok()) status = absl::ErrnoToStatus(errno, absl::StrCat("close ", tmp));
  RETURN_IF_ERROR(status);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: renaming ", tmp, " to ", path));
  }
  renamed = true;
  // Make the rename itself durable: the directory entry lives in the directory.
  const std::string dir = DirectoryOf(path);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: opening directory ", dir));
  const int rc = ::fsync(dir_fd);
  const int fsync_errno = errno;
  ::close(dir_fd);
  if (rc != 0) return absl::ErrnoToStatus(fsync_errno, absl::StrCat("safetensors: fsync of directory ", dir));
  return absl::OkStatus();
}

}  // namespace tinyddp::nn
