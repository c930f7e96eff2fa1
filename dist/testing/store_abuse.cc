// Abusing a TCPStoreServer for real: see store_abuse.h.
#include "dist/testing/store_abuse.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "dist/store/internal/kv_table.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/tcp_store_server.h"

extern char** environ;

namespace tinyddp::dist::testing {
namespace {

constexpr char kChildEnv[] = "TINYDDP_STORE_SERVER_CHILD";
constexpr char kChildSecretEnv[] = "TINYDDP_STORE_SERVER_CHILD_SECRET";
constexpr char kChildSpareFdsEnv[] = "TINYDDP_STORE_SERVER_CHILD_SPARE_FDS";

int OpenDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory's own descriptor
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<RawStoreConnection> RawStoreConnection::Connect(int port) {
  RawStoreConnection c;
  ASSIGN_OR_RETURN(c.socket_, internal::Connect("127.0.0.1", port, internal::DeadlineAfter(std::chrono::seconds(30))));
  return c;
}

absl::Status RawStoreConnection::SendBytes(const void* data, size_t n) {
  return internal::SendAll(socket_.fd(), data, n, internal::DeadlineAfter(std::chrono::seconds(30)));
}

absl::Status RawStoreConnection::SendFrame(const Bytes& body) {
  return internal::SendFrame(socket_.fd(), body, internal::DeadlineAfter(std::chrono::seconds(30)));
}

absl::Status RawStoreConnection::ReadResponse(std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(const Bytes reply,
                   internal::RecvFrame(socket_.fd(), internal::kMaxResponseBytes, internal::DeadlineAfter(timeout)));
  internal::MessageReader reader(reply);
  return internal::ReadResponseStatus(reader);
}

absl::Status RawStoreConnection::Call(const internal::StoreRequest& request, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(SendFrame(internal::EncodeRequest(request)));
  return ReadResponse(timeout);
}

absl::Status RawStoreConnection::Hello(const std::string& secret) {
  return internal::ClientHandshake(socket_.fd(), internal::DeriveStoreKey(secret),
                                   internal::DeadlineAfter(std::chrono::seconds(30)));
}

absl::Status RawStoreConnection::SendHelloOnly() {
  static std::mt19937 rng(std::random_device{}());
  Bytes nonce(32);
  for (auto& b : nonce) b = static_cast<uint8_t>(rng());
  return SendFrame(internal::EncodeRequest(
      {.op = internal::StoreOp::kHello, .key = internal::kProtocolMagic, .value = nonce}));
}

bool RawStoreConnection::ClosedByServerWithin(std::chrono::milliseconds timeout) {
  const auto deadline = internal::DeadlineAfter(timeout);
  do {  // at least one look, even with a zero timeout
    pollfd p{socket_.fd(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, timeout.count() > 0 ? 50 : 0) > 0) {
      while (true) {  // skip whatever the server said before closing (an error response)
        char buf[4096];
        const ssize_t n = ::recv(socket_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        return true;  // the end of the stream, or a reset
      }
    }
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

absl::StatusOr<std::unique_ptr<StoreServerProcess>> StoreServerProcess::Start(
    const StoreServerProcessOptions& options) {
  std::unique_ptr<StoreServerProcess> p(new StoreServerProcess());
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  const char* tmp = std::getenv("TEST_TMPDIR");
  static int count = 0;
  p->stderr_path_ = absl::StrCat(tmp ? tmp : "/tmp", "/store_server_", ::getpid(), "_", count++, ".err");

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back(absl::StrCat(kChildEnv, "=1"));
  env.push_back(absl::StrCat(kChildSecretEnv, "=", options.secret));
  env.push_back(absl::StrCat(kChildSpareFdsEnv, "=", options.spare_fds));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, p->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = ::posix_spawn(&p->pid_, self.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  p->stdin_fd_ = in[1];
  if (rc != 0) {
    ::close(out[0]);
    p->pid_ = -1;
    return absl::InternalError(absl::StrCat("posix_spawn of the store server process failed: ", std::strerror(rc)));
  }
  // The child prints its port on one line once it listens.
  std::string line;
  const auto deadline = internal::DeadlineAfter(std::chrono::seconds(30));
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd pf{out[0], POLLIN, 0};
    if (::poll(&pf, 1, 100) <= 0) continue;
    char buf[64];
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &p->port_) || p->port_ <= 0) {
    return absl::InternalError(absl::StrCat("the store server process did not report its port; stderr: ",
                                            p->Stderr()));
  }
  return p;
}

StoreServerProcess::~StoreServerProcess() { Stop(); }

int StoreServerProcess::Stop() {
  if (pid_ < 0) return -1;
  ::close(stdin_fd_);
  stdin_fd_ = -1;
  int status = 0;
  // The child ends within a second of its stdin closing; a hung one is killed after 60 s.
  for (int i = 0; i < 600 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) ::poll(nullptr, 0, 100);
  if (::waitpid(pid_, &status, WNOHANG) == 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string StoreServerProcess::StatusField(const char* name) const {
  for (absl::string_view line : absl::StrSplit(ReadFileText(absl::StrCat("/proc/", pid_, "/status")), '\n')) {
    if (absl::StartsWith(line, name)) return std::string(absl::StripAsciiWhitespace(line.substr(strlen(name))));
  }
  return "";
}

int64_t StoreServerProcess::RssKiB() const {
  int64_t kib = -1;
  (void)absl::SimpleAtoi(absl::StripSuffix(StatusField("VmRSS:"), " kB"), &kib);
  return kib;
}

int64_t StoreServerProcess::PeakRssKiB() const {
  int64_t kib = -1;
  (void)absl::SimpleAtoi(absl::StripSuffix(StatusField("VmHWM:"), " kB"), &kib);
  return kib;
}

int StoreServerProcess::Threads() const {
  int n = -1;
  (void)absl::SimpleAtoi(StatusField("Threads:"), &n);
  return n;
}

double StoreServerProcess::CpuSeconds() const {
  // /proc/PID/stat: fields 14 and 15 (utime, stime) in clock ticks, after the ")" that ends the name.
  const std::string stat = ReadFileText(absl::StrCat("/proc/", pid_, "/stat"));
  std::vector<std::string> f = absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool StoreServerProcess::WaitUntilQuiet(std::chrono::milliseconds timeout) const {
  const auto deadline = internal::DeadlineAfter(timeout);
  int quiet_in_a_row = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all_asleep = true;
    DIR* dir = ::opendir(absl::StrCat("/proc/", pid_, "/task").c_str());
    if (dir == nullptr) return false;
    while (dirent* e = ::readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const std::string stat = ReadFileText(absl::StrCat("/proc/", pid_, "/task/", e->d_name, "/stat"));
      const size_t close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'S') all_asleep = false;
    }
    ::closedir(dir);
    quiet_in_a_row = all_asleep ? quiet_in_a_row + 1 : 0;
    if (quiet_in_a_row == 2) return true;
    ::poll(nullptr, 0, 50);
  }
  return false;
}

std::string StoreServerProcess::Stderr() const { return ReadFileText(stderr_path_); }

void RunStoreServerChildIfAsked() {
  if (std::getenv(kChildEnv) == nullptr) return;
  const char* secret = std::getenv(kChildSecretEnv);
  int spare = 0;
  if (const char* s = std::getenv(kChildSpareFdsEnv)) (void)absl::SimpleAtoi(s, &spare);
  if (spare > 0) {
    // The listener, the epoll instance, its stop event and the reserve descriptor, then `spare` for connections.
    const rlim_t limit = static_cast<rlim_t>(OpenDescriptors() + 4 + spare);
    rlimit r{limit, limit};
    if (::setrlimit(RLIMIT_NOFILE, &r) != 0) {
      std::perror("setrlimit(RLIMIT_NOFILE)");
      std::_Exit(3);
    }
  }
  TCPStoreServerOptions options;
  options.secret = secret == nullptr ? "" : secret;
  auto server = TCPStoreServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "store server process: %s\n", server.status().ToString().c_str());
    std::_Exit(4);
  }
  std::printf("%d\n", (*server)->port());
  std::fflush(stdout);
  char byte;
  while (::read(0, &byte, 1) > 0) {
  }
  server->reset();
  std::fflush(stderr);
  std::_Exit(0);
}

}  // namespace tinyddp::dist::testing
