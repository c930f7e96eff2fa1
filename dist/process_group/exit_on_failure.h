// ExitOnCollectiveFailure: the one way a process group (or DDP above it) ends the process after a
// collective failed where no Status can reach anyone: DDP's all_reduce failing inside autograd::Backward
// (which returns nothing; PyTorch raises there), or an NCCL watchdog whose launching thread is stuck inside
// an NCCL call. A dead peer or a timeout is expected: the process says what happened and exits with
// kCollectiveFailureExitCode, never abort() (SIGABRT, a core dump). It runs the "last words" hook (the
// launcher's error file), flushes stdio and calls _exit: the group's threads still run, and std::exit
// would destroy static objects under them.
#ifndef TINYDDP_DIST_PROCESS_GROUP_EXIT_ON_FAILURE_H_
#define TINYDDP_DIST_PROCESS_GROUP_EXIT_ON_FAILURE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// The exit status of a process ended by ExitOnCollectiveFailure.
inline constexpr int kCollectiveFailureExitCode = 3;

/// Prints "<who>: <status>" and a hint on stderr, runs the last-words hook, exits. Precondition: !status.ok().
[[noreturn]] void ExitOnCollectiveFailure(absl::string_view who, const absl::Status& status);

/// Called by ExitOnCollectiveFailure with the status, right before the process exits. Set it once, early
/// (ddp_mlp does: its error file, for the launcher's blame); it must not throw or block for long.
void SetLastWordsBeforeCollectiveExit(std::function<void(const absl::Status&)> hook);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_EXIT_ON_FAILURE_H_
