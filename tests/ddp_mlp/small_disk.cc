// A tmpfs in a private mount namespace: see small_disk.h.
#include "tests/ddp_mlp/small_disk.h"

#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tinyddp::testing {

std::string MountTmpfs(const std::string& dir, size_t bytes, bool read_only) {
  static const std::string unshared = [] {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return std::string("making / private: ") + std::strerror(errno);
    }
    return std::string();
  }();
  if (!unshared.empty()) return unshared;
  std::filesystem::create_directories(dir);
  const std::string options = "size=" + std::to_string(bytes);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, options.c_str()) != 0) {
    return std::string("mount -t tmpfs: ") + std::strerror(errno);
  }
  return "";
}

}  // namespace tinyddp::testing
