// Startup checks: see startup_checks.h.
#include "examples/internal/startup_checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "examples/internal/durable_file.h"
#include "examples/internal/train_checkpoint.h"

namespace tinyddp::examples {
namespace {

namespace fs = std::filesystem;

// Permanent (durable_file.h): a restart would find the folder just as unwritable.
absl::Status CannotWrite(const std::string& flag, const std::string& path, const std::string& what,
                         const std::string& why, const char* fix) {
  return MarkPermanent(
      absl::FailedPreconditionError(absl::StrCat("--", flag, "=", path, ": cannot ", what, " (", why, "); ", fix)));
}

}  // namespace

absl::Status CheckWritableFolder(const std::string& dir, const std::string& flag) {
  constexpr char kFix[] = "pick a folder you can write to";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return CannotWrite(flag, dir, "create the folder", ec.message(), kFix);
  if (!fs::is_directory(dir, ec)) return CannotWrite(flag, dir, "use it", "it is not a folder", kFix);
  const std::string probe = absl::StrCat(dir, "/.tinyddp-write-test-", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return CannotWrite(flag, dir, "write there", std::strerror(errno), kFix);
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

absl::Status CheckWritableFile(const std::string& path, const std::string& flag) {
  constexpr char kFix[] = "pick a path in a folder you can write to";
  const fs::path p(path);
  const std::string folder = p.has_parent_path() ? p.parent_path().string() : ".";
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return CannotWrite(flag, path, "write it", absl::StrCat("the folder ", folder, " does not exist"), kFix);
  }
  if (fs::is_directory(p, ec)) return CannotWrite(flag, path, "write it", "it is a folder", kFix);
  // An existing file is opened for writing without truncating it; a new one is created and removed.
  const bool exists = fs::exists(p, ec);
  const int flags = exists ? (O_WRONLY | O_CLOEXEC) : (O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return CannotWrite(flag, path, "write it", std::strerror(errno), kFix);
  ::close(fd);
  if (!exists) ::unlink(path.c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PrepareOutputs(const TrainOptions& o, bool resuming) {
  std::vector<std::string> notes;
  if (!o.trace.empty()) RETURN_IF_ERROR(CheckWritableFile(o.trace, "trace"));
  if (o.checkpoint_dir.empty()) return notes;
  RETURN_IF_ERROR(CheckWritableFolder(o.checkpoint_dir, "checkpoint_dir"));
  for (const std::string& removed : RemoveStaleTemporaries(o.checkpoint_dir)) {
    notes.push_back(absl::StrCat("removed ", removed, ", a checkpoint left half-written by an interrupted run"));
  }
  // A fresh run must not mix its checkpoints with another run's: retention keeps the highest step
  // numbers, which could be the old run's, and a later --resume would continue the wrong run. Permanent:
  // an elastic restart resumes from the folder, and so would continue the other run.
  if (!resuming) {
    const std::vector<int64_t> steps = CheckpointSteps(o.checkpoint_dir);
    if (!steps.empty()) {
      return MarkPermanent(absl::FailedPreconditionError(
          absl::StrCat("--checkpoint_dir=", o.checkpoint_dir,
                       " already holds checkpoints of a run (newest: ", CheckpointPath(o.checkpoint_dir, steps.front()),
                       "); pass --resume to continue it, or use an empty --checkpoint_dir")));
    }
  }
  return notes;
}

}  // namespace tinyddp::examples
