// Supervisor: starts a job's worker processes on this machine and watches them until they are all
// gone. Both the `launch` tool and programs that start their own workers (spawn.h) use it, so they
// fail the same way:
//
//   - when a worker fails (non-zero exit or killed by a signal), the others get SIGTERM, then SIGKILL
//     after a grace period, and the job's result names the failure and how it ended. Plain, that is the
//     first failure seen; which one was the root cause when several ranks fail within moments is a
//     program's judgement: SupervisorOptions::hold_stop lets the others report first, and JobResult's
//     cause fields are its to rewrite after Wait();
//   - a signal that would end this process (SIGINT, SIGTERM, SIGHUP when the terminal goes, SIGQUIT, ...)
//     stops the workers instead: SIGINT/SIGTERM/SIGHUP are forwarded, the others become SIGTERM, which
//     leaves them preempt_grace to checkpoint; more signals while they stop change nothing (a cluster
//     sends several, e.g. SIGUSR1 then SIGTERM), except a second SIGINT (Ctrl-C), which kills them;
//     SIGPIPE is ignored;
//   - every worker runs in its own process group (signals reach its children too) and dies with
//     this process (PR_SET_PDEATHSIG);
//   - a worker's output goes where this process's goes, or to the descriptors its spec names (a program
//     that prefixes each line with "[rank N] " reads them through pipes of its own).
//
// The watch loop is one poll() on a self-pipe fed by signal handlers (SIGCHLD among them).
#ifndef TINYDDP_DIST_LAUNCH_SUPERVISOR_H_
#define TINYDDP_DIST_LAUNCH_SUPERVISOR_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tinyddp::dist {

struct WorkerProcessSpec {
  int rank = 0;        // global rank, for messages and the output prefix
  int local_rank = 0;  // rank on this machine
  std::vector<std::string> argv;  // argv[0] is the program: a path, or a name looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set on top of this process's environment
  int stdout_fd = -1;  // -1: the worker writes to this process's stdout; else to this descriptor
  int stderr_fd = -1;  // the same for stderr
};

struct WorkerExit;

struct SupervisorOptions {
  std::chrono::milliseconds grace = std::chrono::seconds(5);  // SIGTERM to SIGKILL
  std::chrono::milliseconds preempt_grace = std::chrono::seconds(30);  // the same when a signal stopped the job
  std::string name = "launch";  // prefix of this supervisor's own messages on stderr
  /// The seam for a judge of root causes: a worker failed while others run; how long they may take to
  /// report their own failures before they are stopped (`holding`: an earlier hold is running). Unset or
  /// zero: stop them now.
  std::function<std::chrono::milliseconds(const WorkerExit& exit, bool holding)> hold_stop;
};

/// How one worker ended.
struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool signaled = false;  // killed by a signal (value = signal number) rather than exited (value = code)
  int value = 0;
  bool stopped = false;   // it was still running when the supervisor stopped the job (signalled it)
  int64_t time_us = 0;    // wall clock (microseconds since the epoch) when it was reaped
  bool ok() const { return !signaled && value == 0; }
  int exit_code() const { return signaled ? 128 + value : value; }
  /// "rank 1 (local rank 1, pid 4242)".
  std::string Who() const;
  /// "exit code 3", or "signal SIGKILL (9)" and, unless we stopped it, what that usually means.
  std::string How() const;
};

struct JobResult {
  /// 0 if every worker exited 0; else the root cause's exit code (128 + its signal), 128 + the signal
  /// that interrupted the job, or 1 for a stop requested through RequestStop.
  int exit_code = 0;
  /// Empty on success; otherwise one line saying why the job ended, e.g.
  /// "rank 1 (local rank 1, pid 4242) failed first: exit code 3".
  std::string reason;
  std::optional<WorkerExit> first_failure;  // the root cause (plain: the first failure seen while running)
  /// For comparing causes across nodes: the lower `cause_order` is likelier the root cause (a judge's
  /// ranking; plain: 0), then the earlier `cause_time_us` (wall clock). Unset when no worker failed on its
  /// own (the job was stopped from outside).
  std::optional<int> cause_order;
  int64_t cause_time_us = 0;
  bool interrupted = false;     // a signal (SIGINT, SIGTERM, ...) stopped the job: do not restart it
  bool stop_requested = false;  // RequestStop was called (e.g. another node failed)
  bool permanent = false;       // a judge's verdict: no restart can fix the root cause (never set here)
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
    bool running = false;
    WorkerExit exit;
  };
  void Signal(int signo);
  void BeginStop(const std::string& reason, int exit_code, int signo);
  bool ReapOne(Worker& w);
  void OnWorkerFailed(Worker& w);

  SupervisorOptions options_;
  std::vector<Worker> workers_;
  JobResult result_;
  bool stopping_ = false;
  std::optional<std::chrono::steady_clock::time_point> kill_at_;
  std::optional<std::chrono::steady_clock::time_point> hold_until_;  // hold_stop holds the stop back
  std::mutex stop_mu_;
  std::optional<std::string> stop_request_;  // set by RequestStop from another thread
  int wake_pipe_[2] = {-1, -1};
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_SUPERVISOR_H_
