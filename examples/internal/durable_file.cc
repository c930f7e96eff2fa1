// File helpers: see durable_file.h.
#include "examples/internal/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tinyddp::examples {
namespace {

absl::Status Errno(const std::string& call, const std::string& path) {
  const int err = errno;
  const std::string message = absl::StrCat(call, " ", path, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
}

// What a file that is not a regular one is, for the refusal.
const char* FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::FailedPreconditionError(absl::StrCat(path, " is ", FileTypeName(mode), ", not a regular file"));
}

constexpr char kPermanentPayload[] = "tinyddp.permanent_failure";

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  // Looked at before it is opened: opening a FIFO waits for a writer, and reading a device may never end.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno("stat", path);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  // O_NONBLOCK, and a second look at what was opened: `path` may have been replaced by a FIFO in between.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Errno("open", path);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegular(path, st.st_mode);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a regular file: plain reads from here
  std::string out;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = Errno("read", path);
      ::close(fd);
      return status;
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = Errno("write", path);
      ::close(fd);
      return status;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status status = Errno("fsync", path);
    ::close(fd);
    return status;
  }
  if (::close(fd) != 0) return Errno("close", path);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp-", ::getpid());
  absl::Status written = WriteFileDurably(tmp, bytes);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status status = Errno(absl::StrCat("rename ", tmp, " to"), path);
    ::unlink(tmp.c_str());
    return status;
  }
  const size_t slash = path.rfind('/');
  return FsyncDirectory(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

absl::Status FsyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open folder", path);
  if (::fsync(fd) != 0) {
    absl::Status status = Errno("fsync folder", path);
    ::close(fd);
    return status;
  }
  ::close(fd);
  return absl::OkStatus();
}

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large inputs in pieces.
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t piece = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(piece));
    done += piece;
  }
  return static_cast<uint32_t>(crc);
}

absl::Status MarkPermanent(absl::Status status) {
  status.SetPayload(kPermanentPayload, absl::Cord("1"));
  return status;
}

bool IsPermanent(const absl::Status& status) { return status.GetPayload(kPermanentPayload).has_value(); }

std::string PermanentWriteProblem(const std::string& dir, uint64_t bytes_needed) {
  // The folder, or the nearest one above it that exists (it may be its creation that failed).
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(dir.empty() ? "." : dir, ec);
  while (!std::filesystem::exists(path, ec) && path.has_parent_path() && path != path.parent_path()) {
    path = path.parent_path();
  }
  const std::string folder = path.string();
  struct statvfs fs;
  if (::statvfs(folder.c_str(), &fs) != 0) return "";  // cannot tell: not permanent as far as we know
  if (fs.f_flag & ST_RDONLY) return absl::StrCat("the file system holding ", folder, " is read-only");
  if (::access(folder.c_str(), W_OK) != 0) {
    return absl::StrCat("this process may not write into ", folder, " (", std::strerror(errno), ")");
  }
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < bytes_needed) {
    return absl::StrFormat("the disk is full: %.1f MiB free in %s, %.1f MiB needed", free_bytes / 1048576.0, folder,
                           bytes_needed / 1048576.0);
  }
  if (fs.f_files > 0 && fs.f_favail == 0) {
    return absl::StrCat("the file system holding ", folder, " has no free inodes");
  }
  return "";
}

}  // namespace tinyddp::examples
