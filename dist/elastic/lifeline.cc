// Lifeline: see lifeline.h. The guard's loop, and finding processes through /proc.
#include "dist/elastic/lifeline.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist {
namespace {

// Calls `visit` with the pid of every process this one may look at.
void ForEachProcess(const std::function<void(pid_t)>& visit) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return;
  while (const dirent* entry = ::readdir(proc)) {
    int pid = 0;
    if (absl::SimpleAtoi(entry->d_name, &pid) && pid > 0) visit(pid);
  }
  ::closedir(proc);
}

// From /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold spaces): the parent (-1 when unreadable)
// and whether the process has exited (a zombie, not yet reaped).
pid_t ParentOf(pid_t pid, bool* exited) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  const size_t paren = std::getline(stat, line) ? line.rfind(')') : std::string::npos;
  int ppid = -1;
  if (paren == std::string::npos || paren + 4 > line.size()) return -1;
  *exited = line[paren + 2] == 'Z';
  const std::string rest = line.substr(paren + 4);  // after ") S "
  return absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &ppid) ? ppid : -1;
}

// Whether one of `pid`'s descriptors is `file` (as /proc/PID/fd/N reads, e.g. "pipe:[123456]").
bool Holds(pid_t pid, const std::string& file) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* fds = ::opendir(dir.c_str());
  if (fds == nullptr) return false;
  bool holds = false;
  char target[64];
  while (const dirent* entry = ::readdir(fds)) {
    const ssize_t n = ::readlink(absl::StrCat(dir, "/", entry->d_name).c_str(), target, sizeof(target));
    if (n > 0 && file.compare(0, std::string::npos, target, static_cast<size_t>(n)) == 0) holds = true;
  }
  ::closedir(fds);
  return holds;
}

// The guard (see lifeline.h): collects the workers' process groups until the launcher's end of the pipe
// closes, then stops everything that belongs to the job.
[[noreturn]] void RunGuard(int read_fd, pid_t launcher, const std::string& pipe) {
  const pid_t launcher_group = ::getpgrp();
  ::setpgid(0, 0);  // the launcher's group may be signalled as a whole (`timeout -s KILL`, a terminal)
  ::prctl(PR_SET_NAME, "launch-guard");
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE}) ::signal(signo, SIG_IGN);
  const int null_fd = ::open("/dev/null", O_RDWR);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);  // a reader of the launcher's stdout (`$(launch ...)`) sees its end
  std::vector<pid_t> groups;
  pid_t pid = 0;
  for (ssize_t n; (n = ::read(read_fd, &pid, sizeof(pid))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof(pid)) break;
    if (pid == 0) groups.clear();
    if (pid > 0) groups.push_back(pid);
  }
  // The launcher is gone, or done. Whatever still runs is the job's, and stops now; repeated until
  // nothing is found, for processes that forked meanwhile.
  const pid_t self = ::getpid(), own_group = ::getpgrp();
  int stopped = 0;
  for (int pass = 0; pass < 20; ++pass) {
    int found = 0;
    for (pid_t group : groups) found += ::kill(-group, SIGKILL) == 0;
    ForEachProcess([&](pid_t p) {
      if (p == self || p == launcher || !Holds(p, pipe)) return;
      const pid_t group = ::getpgid(p);
      if (group > 1 && group != own_group && group != launcher_group) ::kill(-group, SIGKILL);
      found += ::kill(p, SIGKILL) == 0;
    });
    if (found == 0) break;
    stopped += found;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (stopped > 0) {
    std::fprintf(stderr, "launch: the launcher (pid %d) is gone; its guard stopped what was left of its workers\n",
                 static_cast<int>(launcher));
  }
  ::_exit(0);
}

}  // namespace

Lifeline::Lifeline() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int fds[2];
  if (::pipe(fds) != 0) {
    std::fprintf(stderr, "launch: no guard for the workers (pipe: %s)\n", std::strerror(errno));
    return;
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  ::fcntl(write_fd_, F_SETFD, FD_CLOEXEC);
  ::fcntl(write_fd_, F_SETFL, O_NONBLOCK);  // never wait on the guard
  char target[64] = {};
  const ssize_t n = ::readlink(absl::StrCat("/proc/self/fd/", read_fd_).c_str(), target, sizeof(target) - 1);
  const std::string pipe(target, n > 0 ? static_cast<size_t>(n) : 0);
  const pid_t launcher = ::getpid();
  guard_ = ::fork();
  if (guard_ == 0) {
    ::close(write_fd_);
    RunGuard(read_fd_, launcher, pipe);
  }
  if (guard_ < 0) std::fprintf(stderr, "launch: no guard for the workers (fork: %s)\n", std::strerror(errno));
}

Lifeline::~Lifeline() {
  if (read_fd_ >= 0) ::close(read_fd_);  // first: the guard must not find this process holding it
  if (write_fd_ >= 0) ::close(write_fd_);
  if (guard_ > 0) ::waitpid(guard_, nullptr, 0);  // it sweeps, finds nothing after EndRound, and exits
}

void Lifeline::Tell(pid_t pid) {
  if (write_fd_ >= 0) (void)!::write(write_fd_, &pid, sizeof(pid));
}

void Lifeline::Watch(const std::vector<pid_t>& workers) {
  for (pid_t pid : workers) Tell(pid);
}

void Lifeline::EndRound() {
  Tell(0);
  std::vector<std::string> stopped;
  for (int pass = 0; pass < 100; ++pass) {
    std::vector<pid_t> strays;
    ForEachProcess([&](pid_t p) {
      bool exited = false;
      if (p == guard_ || ParentOf(p, &exited) != ::getpid()) return;
      strays.push_back(p);
      if (!exited && ::kill(p, SIGKILL) == 0) stopped.push_back(absl::StrCat(p));
    });
    if (strays.empty()) break;
    for (pid_t p : strays) ::waitpid(p, nullptr, 0);  // killed: returns promptly; its children are ours next
  }
  if (!stopped.empty()) {
    std::fprintf(stderr, "launch: stopped %zu process(es) the workers left running (pids %s)\n", stopped.size(),
                 absl::StrJoin(stopped, ", ").c_str());
  }
}

}  // namespace tinyddp::dist
