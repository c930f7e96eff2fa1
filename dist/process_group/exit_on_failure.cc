// ExitOnCollectiveFailure: print, last words, flush, _exit.
#include "dist/process_group/exit_on_failure.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace tinyddp::dist {

namespace {

struct LastWords {
  std::mutex mu;
  std::function<void(const absl::Status&)> hook;
};
LastWords& Last() {
  static auto* last = new LastWords();  // never destroyed: used at exit
  return *last;
}

}  // namespace

void SetLastWordsBeforeCollectiveExit(std::function<void(const absl::Status&)> hook) {
  std::lock_guard<std::mutex> lock(Last().mu);
  Last().hook = std::move(hook);
}

void ExitOnCollectiveFailure(absl::string_view who, const absl::Status& status) {
  std::fprintf(stderr,
               "%.*s: %s\n"
               "This process cannot continue after a failed collective (its group is broken); exiting with status "
               "%d.\n",
               static_cast<int>(who.size()), who.data(), status.ToString().c_str(), kCollectiveFailureExitCode);
  std::function<void(const absl::Status&)> hook;
  {
    std::lock_guard<std::mutex> lock(Last().mu);
    hook = Last().hook;
  }
  if (hook) hook(status);
  std::fflush(nullptr);
  ::_exit(kCollectiveFailureExitCode);
}

}  // namespace tinyddp::dist
