// What the fault tests share: a real job (//dist/launch:launch running //examples:ddp_mlp, the way a user
// starts one), started in the background so that a test can hurt it while it trains (freeze a rank, cut a
// link), then waited for with a bound, and its output searched for what a user must see.
#ifndef TINYDDP_TESTS_FAULTS_FAULT_JOB_H_
#define TINYDDP_TESTS_FAULTS_FAULT_JOB_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tinyddp::testing {

/// A file of this test's runfiles ("dist/launch/launch"), or $<env_override> when set (outside Bazel).
std::string Runfile(const std::string& path, const char* env_override);

/// ddp_mlp's flags for a tiny synthetic job on `backend` (32-24-10 MLP, 1200 examples, 19 steps per
/// epoch, one DDP bucket) that trains long enough (--epochs) to be hurt while it runs.
std::vector<std::string> TinyTrainingJob(const std::string& backend);

struct Job {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::string Output() const;  // stdout then stderr, as they are now
};

/// Starts `argv` with `env` added (launcher variables of this process removed, so it is a fresh job).
Job StartJob(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env);

/// `launch LAUNCH_ARGS ddp_mlp PROGRAM_ARGS`, as argv.
std::vector<std::string> LaunchArgv(const std::vector<std::string>& launch_args,
                                    const std::vector<std::string>& program_args);

/// Waits until the job's output contains `text` (a readiness handshake, not a timing); false when the
/// job ended first or `bound` passed.
bool WaitForOutput(const Job& job, const std::string& text, std::chrono::seconds bound);

/// How a process ended.
struct Ended {
  bool finished = false;  // false: still running after the bound (then killed)
  bool signaled = false;
  int value = 0;          // exit status, or the signal
  std::string How() const;
};
/// Waits for the job, killing it (and failing the caller's expectations) if it outlives `bound`.
Ended WaitJob(const Job& job, std::chrono::seconds bound);

/// The pid of the worker of `launcher` whose RANK is `rank` (its child with RANK=<rank> in its
/// environment), or -1.
pid_t WorkerPid(pid_t launcher, int rank);

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_FAULTS_FAULT_JOB_H_
