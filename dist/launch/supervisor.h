// Supervisor: starts a job's worker processes on this machine and watches them until they are all
// gone. Both the `launch` tool and programs that start their own workers (spawn.h) use it, so they
// fail the same way:
//
//   - when a worker fails (non-zero exit or killed by a signal), the others get SIGTERM, then SIGKILL
//     after a grace period, and the job's result names the rank whose failure came first and how;
//   - "first" is the root cause, not the first exit seen: every worker gets an error file to explain
//     its failure in (error_file.h), and a rank that failed on its own beats one that only gave up
//     waiting (a timeout), which beats one that stopped because another failed. After a timeout the
//     others get a moment (timeout_settle) to time out too; a rank still running then, which never
//     timed out, is named as the suspect (a hang);
//   - a signal that would end this process (SIGINT, SIGTERM, SIGHUP when the terminal goes, SIGQUIT, ...)
//     stops the workers instead: SIGINT/SIGTERM/SIGHUP are forwarded, the others become SIGTERM (a second
//     signal kills them); SIGPIPE is ignored;
//   - every worker runs in its own process group (signals reach its children too) and dies with
//     this process (PR_SET_PDEATHSIG); what a worker starts in turn is lifeline.h's (the launcher's);
//   - with prefix_output, each line a worker prints is prefixed with "[rank N] ".
//
// The watch loop is one poll() over the workers' output pipes and a self-pipe fed by signal handlers.
#ifndef TINYDDP_DIST_LAUNCH_SUPERVISOR_H_
#define TINYDDP_DIST_LAUNCH_SUPERVISOR_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "dist/launch/error_file.h"

namespace tinyddp::dist {

struct WorkerProcessSpec {
  int rank = 0;        // global rank, for messages and the output prefix
  int local_rank = 0;  // rank on this machine
  std::vector<std::string> argv;  // argv[0] is the program: a path, or a name looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set on top of this process's environment
};

struct SupervisorOptions {
  bool prefix_output = false;  // "[rank N] " before every line of the workers' stdout and stderr
  std::chrono::milliseconds grace = std::chrono::seconds(5);  // SIGTERM to SIGKILL
  std::string name = "launch";  // prefix of this supervisor's own messages on stderr
  /// After the first worker fails with a timeout, how long the others may take to report theirs before
  /// they are stopped; whoever is still running then and never timed out is the suspect.
  std::chrono::milliseconds timeout_settle = std::chrono::seconds(1);
};

/// How one worker ended.
struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool signaled = false;  // killed by a signal (value = signal number) rather than exited (value = code)
  int value = 0;
  bool stopped = false;   // it was still running when the supervisor stopped the job (signalled it)
  /// What the worker wrote to its error file before exiting (error_file.h), if anything.
  std::optional<WorkerFailure> failure;
  bool ok() const { return !signaled && value == 0; }
  /// "exit code 3" or "signal SIGSEGV (11)".
  std::string How() const;
};

struct JobResult {
  /// 0 if every worker exited 0; else the first failure's exit code, 128 + its signal, 128 + the signal
  /// that interrupted the job, or 1 for a stop requested through RequestStop.
  int exit_code = 0;
  std::optional<WorkerExit> first_failure;
  /// Empty on success; otherwise one line saying why the job ended, e.g.
  /// "rank 1 (local rank 1, pid 4242) failed first: exit code 3 (error: cannot open data.bin)".
  std::string reason;
  /// Set when the root cause was a timeout: the ranks that were still running then and did not time
  /// out themselves (the ones the others waited for).
  std::vector<int> suspects;
  /// What kind of failure the named one was (kError also for a crash without an error file), and when
  /// (wall clock, microseconds): for comparing causes across machines. Unset when no worker failed on its
  /// own (the job was stopped from outside).
  std::optional<FailureKind> cause_kind;
  int64_t cause_time_us = 0;
  bool interrupted = false;  // a signal (SIGINT, SIGTERM, ...) stopped the job: do not restart it
  bool permanent = false;    // the root cause exited with kPermanentFailureExitCode: do not restart it
  std::vector<WorkerExit> exits;  // every worker, in rank order
};

/// Not copyable. Only one Supervisor may be in Wait() at a time in a process (signal handlers are global).
class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options) : options_(std::move(options)) {}
  /// Kills (SIGKILL) and reaps any worker still running, so none outlives this object.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Starts one process per spec. Call once. On an error (naming the rank that could not start) do not
  /// call Wait(): destroying the Supervisor kills the workers already started.
  absl::Status Start(const std::vector<WorkerProcessSpec>& specs);
  /// Watches the workers until all have exited (see the header comment for failures and signals) and
  /// returns how the job ended. Waits as long as the workers run; every wait after a failure is bounded.
  JobResult Wait();
  /// Thread-safe: stop the job (SIGTERM, SIGKILL after the grace period), e.g. because another node failed.
  void RequestStop(const std::string& reason);
  /// The workers' pids, in spec order (valid after Start).
  std::vector<pid_t> pids() const;

 private:
  struct Worker {
    WorkerProcessSpec spec;
    pid_t pid = -1;
    bool running = false;
    int out[2] = {-1, -1};   // read ends of the worker's stdout / stderr pipes (prefix_output only)
    std::string pending[2];  // a partial last line, until its newline arrives
    WorkerExit exit;
    std::string error_file;
    int64_t exited_us = 0;  // wall clock when reaped
  };
  void Signal(int signo);
  void BeginStop(const std::string& reason, int exit_code, int signo);
  void ReadOutput(Worker& w, int stream, bool flush);
  bool ReapOne(Worker& w);
  void OnWorkerFailed(Worker& w);
  void Blame();  // fills result_'s first_failure, exit_code, reason and suspects from every exit

  SupervisorOptions options_;
  std::vector<Worker> workers_;
  JobResult result_;
  bool stopping_ = false;
  std::optional<std::chrono::steady_clock::time_point> kill_at_;
  std::optional<std::chrono::steady_clock::time_point> settle_until_;  // a timeout was seen; stop then
  std::string error_dir_;  // holds the workers' error files; removed by the destructor
  std::mutex stop_mu_;
  std::optional<std::string> stop_request_;  // set by RequestStop from another thread
  std::atomic<bool> stop_requested_{false};
  int wake_pipe_[2] = {-1, -1};
};

/// "SIGTERM" for 15, "signal 99" for unknown numbers.
std::string SignalName(int signo);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_SUPERVISOR_H_
