// ExitOnCollectiveFailure: print, last words, flush, _exit.
#include "dist/process_group/exit_on_failure.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace tinyddp::dist {

namespace {

std::mutex& HookMutex() {
  static std::mutex mu;
  return mu;
}
std::function<void(const absl::Status&)>& Hook() {
  static auto* hook = new std::function<void(const absl::Status&)>();  // never destroyed: used at exit
  return *hook;
}

}  // namespace

void SetLastWordsBeforeCollectiveExit(std::function<void(const absl::Status&)> hook) {
  std::lock_guard<std::mutex> lock(HookMutex());
  Hook() = std::move(hook);
}

void ExitOnCollectiveFailure(absl::string_view who, const absl::Status& status) {
  std::fprintf(stderr,
               "%.*s: %s\n"
               "This process cannot continue after a failed collective (its group is broken); exiting with status "
               "%d.\n",
               static_cast<int>(who.size()), who.data(), status.ToString().c_str(), kCollectiveFailureExitCode);
  std::function<void(const absl::Status&)> hook;
  {
    std::lock_guard<std::mutex> lock(HookMutex());
    hook = Hook();
  }
  if (hook) hook(status);
  std::fflush(nullptr);
  ::_exit(kCollectiveFailureExitCode);
}

}  // namespace tinyddp::dist
