// Helpers for tests that run real processes: re-executing the test binary itself in another role
// (so multi-process tests need no other binary and run outside Bazel too), waiting with a bound,
// and files in a fresh temporary directory through which the processes report what they saw.
#ifndef TINYDDP_DIST_TESTING_PROCESS_TEST_UTIL_H_
#define TINYDDP_DIST_TESTING_PROCESS_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tinyddp::dist::testing {

/// The absolute path of the running binary (/proc/self/exe resolved).
std::string SelfPath();

/// A new empty directory under TEST_TMPDIR (or /tmp).
std::string MakeTempDir();

/// Starts `argv` (argv[0] a path) with `set` added to and `unset` removed from this environment,
/// stdout and stderr redirected to the given files ("" = inherit). Returns the pid.
pid_t StartProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& set,
                   const std::vector<std::string>& unset, const std::string& stdout_path,
                   const std::string& stderr_path);

/// Waits for pid up to `timeout`; on overrun kills it (SIGKILL) and returns nullopt. Else the raw status.
std::optional<int> WaitFor(pid_t pid, std::chrono::milliseconds timeout);

/// Waits up to `timeout` for `path` to exist. For readiness handshakes, not for timing.
bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);  // atomically (write + rename)

/// True if no process with this pid exists any more (kill(pid, 0) fails with ESRCH).
bool ProcessGone(pid_t pid);

/// The env:// variables a test process must not inherit, or it would think it is already a worker.
std::vector<std::string> LauncherVariables();

}  // namespace tinyddp::dist::testing

#endif  // TINYDDP_DIST_TESTING_PROCESS_TEST_UTIL_H_
