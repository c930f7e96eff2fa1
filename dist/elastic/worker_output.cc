// PrefixedOutput: see worker_output.h. One poll() over every worker's stdout and stderr pipe.
#include "dist/elastic/worker_output.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

namespace {

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

}  // namespace

PrefixedOutput::~PrefixedOutput() {
  Finish();
  for (Stream& s : streams_) {
    for (int fd : {s.read_fd, s.write_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }
}

absl::Status PrefixedOutput::Attach(std::vector<WorkerProcessSpec>& specs) {
  for (WorkerProcessSpec& spec : specs) {
    for (int to : {STDOUT_FILENO, STDERR_FILENO}) {
      int fds[2];
      // CLOEXEC: no other worker inherits this pipe; the supervisor dup2()s the write end onto the
      // worker's own stdout or stderr, which exec keeps.
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        return absl::InternalError(absl::StrCat("pipe2 failed for rank ", spec.rank, "'s output: ",
                                                std::strerror(errno)));
      }
      // Non-blocking: a grandchild that inherited the pipe must not be able to stall the reading loop.
      ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL, 0) | O_NONBLOCK);
      streams_.push_back({.rank = spec.rank, .read_fd = fds[0], .write_fd = fds[1], .to = to});
      (to == STDOUT_FILENO ? spec.stdout_fd : spec.stderr_fd) = fds[1];
    }
  }
  return absl::OkStatus();
}

void PrefixedOutput::Start() {
  for (Stream& s : streams_) {
    if (s.write_fd >= 0) ::close(s.write_fd);
    s.write_fd = -1;
  }
  thread_ = std::thread([this] { Loop(); });
}

void PrefixedOutput::Finish() {
  finishing_ = true;
  if (thread_.joinable()) thread_.join();
}

void PrefixedOutput::Read(Stream& s, bool flush) {
  char buf[65536];
  const ssize_t n = ::read(s.read_fd, buf, sizeof(buf));
  if (n > 0) s.pending.append(buf, static_cast<size_t>(n));
  const bool eof = n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
  const std::string prefix = absl::StrCat("[rank ", s.rank, "] ");
  std::string lines;
  size_t start = 0, newline;
  while ((newline = s.pending.find('\n', start)) != std::string::npos) {
    lines += prefix + s.pending.substr(start, newline - start + 1);
    start = newline + 1;
  }
  s.pending.erase(0, start);
  if ((eof || flush) && !s.pending.empty()) {
    lines += prefix + s.pending + "\n";
    s.pending.clear();
  }
  WriteAll(s.to, lines);
  if (eof) {
    ::close(s.read_fd);
    s.read_fd = -1;
  }
}

void PrefixedOutput::Loop() {
  // A write to a closed stdout fails with EPIPE here instead of killing the launcher.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> drain_until;
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    for (Stream& s : streams_) {
      if (s.read_fd < 0) continue;
      fds.push_back({s.read_fd, POLLIN, 0});
      owners.push_back(&s);
    }
    if (fds.empty()) break;
    if (finishing_ && !drain_until) drain_until = Clock::now() + kDrain;
    if (drain_until && Clock::now() >= *drain_until) break;
    // Finish() is noticed within 100 ms; the streams normally end by themselves as the workers exit.
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) Read(*owners[i], false);
    }
  }
  for (Stream& s : streams_) {
    if (s.read_fd < 0) continue;
    Read(s, true);  // whatever is left, even without a final newline
    if (s.read_fd >= 0) ::close(s.read_fd);
    s.read_fd = -1;
  }
}

}  // namespace tinyddp::dist
