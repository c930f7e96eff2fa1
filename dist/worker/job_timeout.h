// The job's timeout: one number that bounds every wait of a distributed job (connecting to the store,
// every store Get/Wait, the process groups' rendezvous, NCCL communicator setup, every collective, and
// the launchers' own waits for each other), so that a rank that hangs or dies costs the others at most
// this long before they exit with an error that says what they were waiting for.
//
// A program's --timeout flag wins; otherwise TINYDDP_TIMEOUT (for any program: the demos, your own);
// otherwise 300 s, PyTorch's default for Gloo. Values are seconds ("30") or Abseil durations ("30s",
// "2m", "1h30m", "500ms"). `launch` hands its timeout to the workers as TINYDDP_TIMEOUT.
//
// Read by dist/init.h (InitOptions::timeout), the launcher and ddp_mlp's flags; sits in dist/launch/
// because the launcher may not depend on the process groups that init.h pulls in.
#ifndef TINYDDP_DIST_WORKER_JOB_TIMEOUT_H_
#define TINYDDP_DIST_WORKER_JOB_TIMEOUT_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

inline constexpr char kTimeoutEnv[] = "TINYDDP_TIMEOUT";
inline constexpr std::chrono::milliseconds kDefaultJobTimeout = std::chrono::seconds(300);
/// The longest timeout accepted: the store clamps to it too ("never forever").
inline constexpr std::chrono::milliseconds kMaxJobTimeout = std::chrono::hours(24);

/// "30" (seconds), "30s", "2m", "1.5s", "500ms", "1h30m" -> milliseconds. InvalidArgument, mentioning
/// `source` (e.g. "--timeout" or "TINYDDP_TIMEOUT"), for anything else, for values below 1 ms and above
/// kMaxJobTimeout.
absl::StatusOr<std::chrono::milliseconds> ParseTimeout(absl::string_view text, absl::string_view source);

/// The job's timeout: `flag_value` when not empty (parsed as from `flag_name`; a different $TINYDDP_TIMEOUT,
/// a launcher's, is reported on stderr), else $TINYDDP_TIMEOUT when set and not empty, else kDefaultJobTimeout.
absl::StatusOr<std::chrono::milliseconds> ResolveJobTimeout(absl::string_view flag_value = "",
                                                            absl::string_view flag_name = "--timeout");

/// "20s", "5m", "1.5s", "250ms": how messages and TINYDDP_TIMEOUT values spell a timeout.
std::string FormatTimeout(std::chrono::milliseconds timeout);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_WORKER_JOB_TIMEOUT_H_
