// Supervisor: see supervisor.h. Start() forks and execs each worker; Wait() is the watch loop.
#include "dist/launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace tinyddp::dist {

namespace {

// The write end of the active supervisor's self-pipe, for the signal handlers (which can only do
// async-signal-safe work: write one byte naming the signal; the watch loop does the rest).
volatile sig_atomic_t g_wake_fd = -1;

void OnSignal(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  if (g_wake_fd >= 0) (void)!::write(g_wake_fd, &byte, 1);
  errno = saved_errno;
}

void WriteAll(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: drop the output rather than block the job
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Resolves a program name the way execvp would, but in the parent: after fork() in a process that
// may have other threads (the store server), the child may only call async-signal-safe functions.
std::string ResolveProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return program;  // execve fails with ENOENT, reported through the error pipe
}

// This process's environment with `extra` set on top, as execve wants it ("NAME=value", then a null).
std::vector<std::string> MergedEnvironment(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    if (std::none_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == name; })) {
      out.emplace_back(entry);
    }
  }
  for (const auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// "SIGTERM" for 15, "signal 99" for unknown numbers.
std::string SignalName(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);  // "TERM"
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", signo);
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string WorkerExit::Who() const {
  return absl::StrCat("rank ", rank, " (local rank ", local_rank, ", pid ", pid, ")");
}

std::string WorkerExit::How() const {
  if (!signaled) return absl::StrCat("exit code ", value);
  std::string how = absl::StrCat("signal ", SignalName(value), " (", value, ")");
  if (stopped) return how;  // our own SIGTERM or SIGKILL
  // What a signal that ended a worker on its own usually means.
  switch (value) {
    case SIGKILL: return how + " (sent from outside the job: the out-of-memory killer? see dmesg)";
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL: return how + " (a crash: its last output above, a debugger or a core dump show where)";
    case SIGABRT: return how + " (it aborted: its last lines above say why)";
    default: return how;
  }
}

Supervisor::~Supervisor() {
  for (Worker& w : workers_) {
    if (!w.running) continue;
    ::kill(-w.exit.pid, SIGKILL);
    ::kill(w.exit.pid, SIGKILL);
    int status = 0;
    ::waitpid(w.exit.pid, &status, 0);  // SIGKILL cannot be caught: this returns promptly
  }
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

std::vector<pid_t> Supervisor::pids() const {
  std::vector<pid_t> out;
  for (const Worker& w : workers_) out.push_back(w.exit.pid);
  return out;
}

absl::Status Supervisor::Start(const std::vector<WorkerProcessSpec>& specs) {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 failed: ", std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  workers_.reserve(specs.size());
  for (const WorkerProcessSpec& spec : specs) {
    Worker& w = workers_.emplace_back();
    w.spec = spec;
    w.exit.rank = spec.rank;
    w.exit.local_rank = spec.local_rank;
    // Everything the child needs is built before fork(): see ResolveProgram.
    const std::string program = ResolveProgram(spec.argv.at(0));
    std::vector<std::string> argv_strings = spec.argv;
    std::vector<std::string> env_strings = MergedEnvironment(w.spec.env);
    std::vector<char*> argv = CStrings(argv_strings);
    std::vector<char*> envp = CStrings(env_strings);
    int exec_error[2];  // the child reports a failed execve here; a successful one closes it (CLOEXEC)
    if (::pipe2(exec_error, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the supervisor died before prctl took effect
      if (spec.stdout_fd >= 0) ::dup2(spec.stdout_fd, STDOUT_FILENO);
      if (spec.stderr_fd >= 0) ::dup2(spec.stderr_fd, STDERR_FILENO);
      ::execve(program.c_str(), argv.data(), envp.data());
      const int err = errno;
      (void)!::write(exec_error[1], &err, sizeof(err));
      ::_exit(127);
    }
    ::close(exec_error[1]);
    if (pid < 0) {
      ::close(exec_error[0]);
      return absl::ResourceExhaustedError(absl::StrCat("fork failed for rank ", spec.rank, ": ", std::strerror(errno)));
    }
    ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
    w.running = true;
    w.exit.pid = pid;
    int err = 0;
    ssize_t n;
    do {
      n = ::read(exec_error[0], &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    ::close(exec_error[0]);
    if (n == sizeof(err)) {
      return absl::InvalidArgumentError(absl::StrCat("could not start rank ", spec.rank, ": ", spec.argv[0], ": ",
                                                     std::strerror(err)));  // the destructor reaps the others
    }
  }
  return absl::OkStatus();
}

bool Supervisor::ReapOne(Worker& w) {
  int status = 0;
  if (::waitpid(w.exit.pid, &status, WNOHANG) != w.exit.pid) return false;
  w.running = false;
  w.exit.time_us = NowMicros();
  w.exit.signaled = WIFSIGNALED(status);
  w.exit.value = w.exit.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  return true;
}

void Supervisor::BeginStop(const std::string& reason, int exit_code, int signo) {
  stopping_ = true;
  result_.reason = reason;
  result_.exit_code = exit_code;
  int still_running = 0;
  for (Worker& w : workers_) {
    if (!w.running) continue;
    ++still_running;
    w.exit.stopped = true;
    ::kill(-w.exit.pid, signo);  // the worker's whole process group: its own children stop too
  }
  const auto grace = result_.interrupted && signo == SIGTERM ? options_.preempt_grace : options_.grace;
  kill_at_ = std::chrono::steady_clock::now() + grace;
  if (still_running > 0) {
    WriteAll(STDERR_FILENO, absl::StrCat(options_.name, ": ", reason, "; sending ", SignalName(signo), " to the other ",
                                         still_running, " worker(s), SIGKILL after ", grace.count() / 1000.0, "s\n"));
  }
}

void Supervisor::Signal(int signo) {
  if (stopping_) {
    // A cluster sends more than one signal in one preemption (Slurm's --signal=USR1@N, then SIGTERM at the
    // time limit; a repeated scancel) and still waits its own grace: the workers keep theirs to checkpoint.
    // Only a second Ctrl-C cuts it short: a person at a terminal who does not want to wait.
    if (signo != SIGINT) {
      WriteAll(STDERR_FILENO, absl::StrCat(options_.name, ": ", SignalName(signo), " while the workers stop: "
                                           "they keep their grace (a second Ctrl-C kills them now)\n"));
      return;
    }
    for (Worker& w : workers_) {
      if (w.running) ::kill(-w.exit.pid, SIGKILL);
    }
    return;
  }
  result_.interrupted = true;
  const int forward = signo == SIGINT || signo == SIGTERM || signo == SIGHUP ? signo : SIGTERM;
  BeginStop(absl::StrCat("interrupted by ", SignalName(signo), forward == signo ? ", forwarding it" : ""), 128 + signo,
            forward);
}

// A worker failed while the job ran: the others stop now, unless hold_stop holds the stop back a moment
// to let them report their own failures.
void Supervisor::OnWorkerFailed(Worker& w) {
  if (stopping_) return;
  if (!result_.first_failure) result_.first_failure = w.exit;
  const std::chrono::milliseconds hold =
      options_.hold_stop ? options_.hold_stop(w.exit, hold_until_.has_value()) : std::chrono::milliseconds(0);
  if (hold.count() > 0) {
    if (!hold_until_) hold_until_ = std::chrono::steady_clock::now() + hold;
    return;
  }
  BeginStop(absl::StrCat(w.exit.Who(), " exited with ", w.exit.How()), w.exit.exit_code(), SIGTERM);
}

void Supervisor::RequestStop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!stop_request_) stop_request_ = reason;
  }
  const unsigned char wake = 0;
  if (wake_pipe_[1] >= 0) (void)!::write(wake_pipe_[1], &wake, 1);
}

JobResult Supervisor::Wait() {
  // Every signal whose default would end this process stops the workers instead; SIGCHLD wakes the loop.
  constexpr int kHandled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGXFSZ};
  struct sigaction action {}, old[std::size(kHandled)], old_pipe{}, ignore{};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  g_wake_fd = wake_pipe_[1];
  for (size_t i = 0; i < std::size(kHandled); ++i) ::sigaction(kHandled[i], &action, &old[i]);
  ignore.sa_handler = SIG_IGN;  // a closed stdout (`launch ... | head`) must not kill the supervisor
  ::sigaction(SIGPIPE, &ignore, &old_pipe);

  using Clock = std::chrono::steady_clock;
  while (std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; })) {
    // Poll at least once a second: a backstop should a SIGCHLD ever be missed.
    const auto now = Clock::now();
    auto wait = std::chrono::milliseconds(1000);
    for (const auto& deadline : {kill_at_, stopping_ ? std::nullopt : hold_until_}) {
      if (deadline) wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now));
    }
    pollfd wake = {wake_pipe_[0], POLLIN, 0};
    ::poll(&wake, 1, static_cast<int>(std::max<int64_t>(wait.count(), 0)));

    if (wake.revents & POLLIN) {
      unsigned char bytes[64];
      ssize_t n;
      while ((n = ::read(wake_pipe_[0], bytes, sizeof(bytes))) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          if (bytes[i] != 0 && bytes[i] != SIGCHLD) Signal(bytes[i]);  // 0: RequestStop's wake-up
        }
      }
    }
    std::optional<std::string> request;
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      request.swap(stop_request_);
    }
    if (request) {
      result_.stop_requested = true;
      if (!stopping_) BeginStop(*request, 1, SIGTERM);
    }
    // Reap every worker that has exited before acting on any: one that died at the same moment as
    // another must not count as stopped by the stop the other's exit begins.
    std::vector<Worker*> exited;
    for (Worker& w : workers_) {
      if (w.running && ReapOne(w)) exited.push_back(&w);
    }
    for (Worker* w : exited) {
      if (!w->exit.ok()) OnWorkerFailed(*w);
    }
    if (hold_until_ && !stopping_ && Clock::now() >= *hold_until_) {
      const WorkerExit& first = *result_.first_failure;
      BeginStop(absl::StrCat("stopping the job after ", first.Who(), " failed"), first.exit_code(), SIGTERM);
    }
    if (kill_at_ && Clock::now() >= *kill_at_) {
      for (Worker& w : workers_) {
        if (w.running) ::kill(-w.exit.pid, SIGKILL);
      }
      kill_at_.reset();
    }
  }
  for (const Worker& w : workers_) result_.exits.push_back(w.exit);
  if (!result_.interrupted) {
    // Plain, the first failure seen while the job ran is its cause; a judge may rewrite it after Wait().
    if (const std::optional<WorkerExit>& first = result_.first_failure) {
      result_.exit_code = first->exit_code();
      result_.reason = absl::StrCat(first->Who(), " failed first: ", first->How());
      result_.cause_order = 0;
      result_.cause_time_us = first->time_us;
    }
  }
  for (size_t i = 0; i < std::size(kHandled); ++i) ::sigaction(kHandled[i], &old[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  g_wake_fd = -1;
  return result_;
}

}  // namespace tinyddp::dist
