// ExitOnCollectiveFailure: the one way a process group (or DDP above it) ends the process after a
// collective failed where no Status can be returned to anyone: DDP's all_reduce failing inside
// autograd::Backward (which returns nothing; PyTorch raises there), or an NCCL watchdog whose launching
// thread is stuck inside an NCCL call. A dead peer or a timeout is an expected failure, so the process
// says what happened, with the collective and the flight recorder's files, and exits with
// kCollectiveFailureExitCode: never abort() and its SIGABRT, core dump and "crashed" look.
//
// It exits with _exit, after flushing stdio: the group's own threads (Gloo's, the watchdog) are still
// running, and std::exit would destroy static objects under them, the classic crash at exit.
// Before it, the "last words" hook runs, if a program set one (e.g. to write the launcher's error file,
// which this layer cannot know about).
#ifndef TINYDDP_DIST_PROCESS_GROUP_EXIT_ON_FAILURE_H_
#define TINYDDP_DIST_PROCESS_GROUP_EXIT_ON_FAILURE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// The exit status of a process ended by ExitOnCollectiveFailure.
inline constexpr int kCollectiveFailureExitCode = 3;

/// Prints "<who>: <status>" and a hint on stderr, runs the last-words hook, and exits the process with
/// kCollectiveFailureExitCode. Precondition: !status.ok().
[[noreturn]] void ExitOnCollectiveFailure(absl::string_view who, const absl::Status& status);

/// Called by ExitOnCollectiveFailure with the status, right before the process exits. Set it once, early
/// (InitProcessGroup does); it must not throw or block for long.
void SetLastWordsBeforeCollectiveExit(std::function<void(const absl::Status&)> hook);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_EXIT_ON_FAILURE_H_
