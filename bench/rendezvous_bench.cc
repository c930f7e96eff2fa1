// rendezvous_bench: how the job's store scales with the number of ranks, up to the size of the largest jobs
// (98,304 ranks). N simulated ranks meet at one TCPStoreServer the way InitProcessGroup has them meet, each
// with O(1) requests:
//
//   connect+auth  open a connection, run the handshake with the job secret (internal/store_protocol.h)
//   publish       Set "rank/<r>/addr" (64 bytes, where its transport listens); rank 0 also Sets the
//                 128-byte "unique_id" (NCCL's ncclUniqueId)
//   barrier       StoreBarrier's two requests: Add "barrier/arrived"; the last arrival Sets "barrier/done";
//                 every rank Waits on "barrier/done", parked on the server until that Set
//   id broadcast  Get "unique_id" (every rank reads rank 0's NCCL id)
//
//   ./bazelw run -c opt //bench:rendezvous_bench -- --ranks=1024,4096,16384 --processes=4
//   python3 bench/rendezvous_torch.py --ranks=1024,4096,16384 --processes=4   (PyTorch's libuv TCPStore)
//   bench/rendezvous_session.sh BUNDLE_DIR    (both, 1K..98K, on the GPU machine's 16-core host)
//
// The server runs in a process of its own (dist/testing/store_abuse.h), as the launcher hosts it: loopback,
// a job secret, the default limits. The ranks live in --processes client processes, each an epoll loop
// holding thousands of connections (a real rank is a process with one connection; what the server sees is
// the same: N authenticated connections and their requests). Rank r connects from 127.1.x.y (one source
// address per 4,096 ranks) so that one address's ~28,000 ephemeral ports never run out. At most --inflight
// ranks per process connect at once (ranks of a real job start over seconds, not in one instant).
//
// Each phase's time is when its last rank finished it, minus when the previous phase's last rank finished
// (all clocks are CLOCK_MONOTONIC on one machine). Then the server's peak resident memory (VmHWM) and the
// CPU time it used (user + system), with every connection still open. One JSON line per N for scripts.
// The bench raises its own descriptor limit to the hard limit and says what each N needs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/testing/store_abuse.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, ranks, "1024,2048,4096,8192", "comma-separated numbers of simulated ranks");
ABSL_FLAG(int, processes, 4, "client processes the ranks are spread over");
ABSL_FLAG(int, inflight, 0,
          "ranks of one client process connecting (not yet authenticated) at once; 0: the listen backlog\n"
          "          (net.core.somaxconn) shared by the client processes, at most 1024, so no SYN is dropped");
ABSL_FLAG(int, strangers, 0, "silent connections opened to the server before the ranks start");
ABSL_FLAG(int, timeout_s, 300, "bound on every rank's connect and blocking calls, in seconds");

namespace tinyddp::dist {
namespace {

using Clock = std::chrono::steady_clock;
using internal::MessageReader;
using internal::StoreOp;
using internal::StoreRequest;
constexpr char kSecret[] = "bench-secret-7c1e5b9d2a4f6e8013579bdf";
constexpr int kRanksPerSourceAddress = 4096;
constexpr int kPhases = 4;  // connect+auth, publish, barrier, id broadcast
const char* const kPhaseNames[kPhases] = {"connect+auth", "publish", "barrier", "id bcast"};

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// What one client process reports: when its last rank finished each phase, and the failures.
struct ProcessResult {
  int64_t phase_end_ns[kPhases] = {};
  int failed = 0;
  int reconnects = 0;  // connections lost or refused during the handshake, and tried again
  char first_error[512] = {};
};

Bytes Frame(const StoreRequest& request) {
  const Bytes body = internal::EncodeRequest(request);
  const uint32_t len = static_cast<uint32_t>(body.size());
  Bytes frame = {uint8_t(len), uint8_t(len >> 8), uint8_t(len >> 16), uint8_t(len >> 24)};
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

// --- One client process: an epoll loop driving `count` ranks through the phases -----------------------

class RankDriver {
 public:
  RankDriver(int first, int count, int world, int port, int inflight, std::chrono::milliseconds timeout)
      : first_(first), world_(world), port_(port), inflight_(inflight), timeout_(timeout),
        key_(internal::DeriveStoreKey(kSecret)), ranks_(count), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {}

  ProcessResult Run() {
    for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) waiting_.push_back(i);
    const auto deadline = Clock::now() + timeout_ + std::chrono::seconds(30);
    std::vector<epoll_event> events(4096);
    while (done_ < static_cast<int>(ranks_.size()) && Clock::now() < deadline) {
      while (connecting_ < inflight_ && !waiting_.empty()) {
        const int i = waiting_.front();
        waiting_.pop_front();
        StartConnect(i);
      }
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 10);
      for (int e = 0; e < n; ++e) OnEvent(static_cast<int>(events[e].data.u32), events[e].events);
      const auto now = Clock::now();  // retries whose backoff is over go back in line
      for (auto it = retry_at_.begin(); it != retry_at_.end();) {
        if (it->first <= now) {
          waiting_.push_front(it->second);
          it = retry_at_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (done_ < static_cast<int>(ranks_.size())) {
      Fail(-1, absl::StrCat(ranks_.size() - done_, " ranks of this process did not finish in time"));
      result_.failed = static_cast<int>(ranks_.size()) - done_;
    }
    return result_;
  }

 private:
  enum Step { kIdle, kConnecting, kChallenge, kAnswer, kSetAddr, kSetId, kAdd, kSetDone, kWait, kGet, kDone };
  struct Rank {
    int fd = -1;
    Step step = kIdle;
    Bytes in, client_nonce, server_nonce;
    std::chrono::milliseconds backoff{10};
  };

  int RankOf(int i) const { return first_ + i; }

  void Fail(int i, const std::string& why) {
    if (result_.first_error[0] == '\0') {
      std::snprintf(result_.first_error, sizeof(result_.first_error), "rank %d: %s", i < 0 ? -1 : RankOf(i),
                    why.c_str());
    }
  }

  void StartConnect(int i) {
    Rank& r = ranks_[i];
    r.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) return Lost(i, absl::StrCat("socket: ", std::strerror(errno)));
    int one = 1;
    ::setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(r.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    const int source = RankOf(i) / kRanksPerSourceAddress;  // 127.1.x.y: the port is picked at connect
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | ((source / 250) << 8) | (source % 250 + 1));
    sockaddr_in server{};
    server.sin_family = AF_INET;
    server.sin_port = htons(static_cast<uint16_t>(port_));
    server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(r.fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      return Lost(i, absl::StrCat("bind: ", std::strerror(errno)));
    }
    if (::connect(r.fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) != 0 && errno != EINPROGRESS) {
      return Lost(i, absl::StrCat("connect: ", std::strerror(errno)));
    }
    epoll_event ev{EPOLLOUT | EPOLLIN | EPOLLRDHUP, {.u32 = static_cast<uint32_t>(i)}};
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, r.fd, &ev);
    r.step = kConnecting;
    ++connecting_;
  }

  // The connection failed before the handshake completed (refused, reset, evicted, the server full):
  // close it and try again after a backoff, as TCPStore's client does.
  void Lost(int i, const std::string& why) {
    Rank& r = ranks_[i];
    if (r.fd >= 0) ::close(r.fd);
    r.fd = -1;
    r.in.clear();
    if (r.step != kIdle) --connecting_;
    r.step = kIdle;
    ++result_.reconnects;
    if (Clock::now() > give_up_) {
      Fail(i, why);
      return;
    }
    retry_at_.emplace_back(Clock::now() + r.backoff, i);
    r.backoff = std::min<std::chrono::milliseconds>(r.backoff * 2, std::chrono::seconds(1));
  }

  void Send(int i, const StoreRequest& request) {
    const Bytes f = Frame(request);
    // Requests are small and one at a time: the socket's buffer always takes them whole.
    if (::send(ranks_[i].fd, f.data(), f.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(f.size())) {
      Lost(i, absl::StrCat("send: ", std::strerror(errno)));
    }
  }

  void Finish(int i, int phase) {
    result_.phase_end_ns[phase] = std::max(result_.phase_end_ns[phase], NowNs());
  }

  void OnEvent(int i, uint32_t events) {
    Rank& r = ranks_[i];
    if (r.fd < 0) return;
    if (r.step == kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) return Lost(i, absl::StrCat("connect: ", std::strerror(err)));
      epoll_event ev{EPOLLIN | EPOLLRDHUP, {.u32 = static_cast<uint32_t>(i)}};
      ::epoll_ctl(epoll_, EPOLL_CTL_MOD, r.fd, &ev);
      r.client_nonce.resize(32);
      for (auto& b : r.client_nonce) b = static_cast<uint8_t>(rng_());
      r.step = kChallenge;
      return Send(i, {.op = StoreOp::kHello, .key = internal::kProtocolMagic, .value = r.client_nonce});
    }
    uint8_t buf[4096];
    while (true) {
      const ssize_t n = ::recv(r.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        r.in.insert(r.in.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (r.step == kChallenge || r.step == kAnswer) return Lost(i, "the server closed the connection");
      ++done_;  // after the handshake a lost connection is a failed rank
      ++result_.failed;
      ::close(r.fd);
      r.fd = -1;
      return Fail(i, "the server closed the connection");
    }
    while (r.in.size() >= 4) {
      uint32_t len = 0;
      for (int b = 0; b < 4; ++b) len |= static_cast<uint32_t>(r.in[b]) << (8 * b);
      if (r.in.size() < 4 + size_t{len}) return;
      MessageReader reply(Bytes(r.in.begin() + 4, r.in.begin() + 4 + len));
      r.in.erase(r.in.begin(), r.in.begin() + 4 + len);
      OnReply(i, reply);
      if (r.fd < 0) return;
    }
  }

  // One answer, and the rank's next request.
  void OnReply(int i, MessageReader& reply) {
    Rank& r = ranks_[i];
    absl::Status status = internal::ReadResponseStatus(reply);
    if (!status.ok()) {
      if ((r.step == kChallenge || r.step == kAnswer) && (absl::IsResourceExhausted(status) || absl::IsUnavailable(status))) {
        return Lost(i, status.ToString());
      }
      ++done_;
      ++result_.failed;
      ::close(r.fd);
      r.fd = -1;
      return Fail(i, status.ToString());
    }
    const int64_t timeout_ms = timeout_.count();
    const std::string me = absl::StrCat("rank/", RankOf(i), "/addr");
    switch (r.step) {
      case kChallenge: {
        absl::StatusOr<Bytes> server_nonce = reply.Blob();
        r.step = kAnswer;
        r.server_nonce = server_nonce.ok() ? *server_nonce : Bytes();
        return Send(i, {.op = StoreOp::kProof,
                        .value = internal::HandshakeMac(key_, "client", r.client_nonce, r.server_nonce)});
      }
      case kAnswer: {
        --connecting_;
        absl::StatusOr<Bytes> server_mac = reply.Blob();  // the server proves it knows the secret too
        if (!server_mac.ok() || *server_mac != internal::HandshakeMac(key_, "server", r.client_nonce, r.server_nonce)) {
          ++done_;
          ++result_.failed;
          return Fail(i, "the server's proof is wrong");
        }
        Bytes().swap(r.client_nonce);
        Bytes().swap(r.server_nonce);
        Finish(i, 0);
        r.step = kSetAddr;
        const std::string address = absl::StrCat("10.", RankOf(i) >> 16, ".", (RankOf(i) >> 8) & 255, ".",
                                                 RankOf(i) & 255, ":29400/", std::string(40, 'a'));
        return Send(i, {.op = StoreOp::kSet, .key = me, .value = Bytes(address.begin(), address.end())});
      }
      case kSetAddr:
        if (RankOf(i) == 0) {
          r.step = kSetId;
          return Send(i, {.op = StoreOp::kSet, .key = "unique_id", .value = Bytes(128, 0x5a)});
        }
        [[fallthrough]];
      case kSetId:
        Finish(i, 1);
        r.step = kAdd;
        return Send(i, {.op = StoreOp::kAdd, .key = "barrier/arrived", .number = 1});
      case kAdd: {
        absl::StatusOr<int64_t> arrived = reply.I64();
        if (arrived.ok() && *arrived == world_) {
          r.step = kSetDone;
          return Send(i, {.op = StoreOp::kSet, .key = "barrier/done", .value = {'1'}});
        }
      }
        [[fallthrough]];
      case kSetDone:
        r.step = kWait;
        return Send(i, {.op = StoreOp::kWait, .keys = {"barrier/done"}, .number = timeout_ms});
      case kWait:
        Finish(i, 2);
        r.step = kGet;
        return Send(i, {.op = StoreOp::kGet, .key = "unique_id", .number = timeout_ms});
      case kGet: {
        absl::StatusOr<Bytes> id = reply.Blob();
        if (!id.ok() || id->size() != 128) {
          ++result_.failed;
          Fail(i, "the unique id came back with the wrong size");
        }
        Finish(i, 3);
        r.step = kDone;
        ++done_;
        Bytes().swap(r.in);
        return;
      }
      default:
        return;
    }
  }

  const int first_, world_, port_, inflight_;
  const std::chrono::milliseconds timeout_;
  const std::string key_;
  std::vector<Rank> ranks_;
  const int epoll_;
  std::deque<int> waiting_;  // ranks not yet connecting
  std::vector<std::pair<Clock::time_point, int>> retry_at_;
  int connecting_ = 0, done_ = 0;
  std::mt19937_64 rng_{std::random_device{}()};
  Clock::time_point give_up_ = Clock::now() + std::chrono::seconds(600);
  ProcessResult result_;
};

// --- The parent: a server, the client processes, the table ----------------------------------------------

struct Result {
  int ranks = 0, failed = 0, reconnects = 0;
  std::string first_error;
  double phase_s[kPhases] = {}, total_s = 0, server_cpu_s = 0;
  int64_t server_peak_kib = 0;
  int server_threads = 0;
};

bool ReadAll(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Opens `count` connections that never say hello (strangers on the store's port).
std::vector<int> Strangers(int port, int count) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    sockaddr_in local{}, server{};
    local.sin_family = server.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl((127u << 24) | (2u << 16) | 1);
    server.sin_port = htons(static_cast<uint16_t>(port));
    server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) == 0) fds.push_back(fd);
    else ::close(fd);
  }
  return fds;
}

Result Rendezvous(int ranks, int processes, int inflight, int strangers, std::chrono::milliseconds timeout) {
  Result result;
  result.ranks = ranks;
  auto server = testing::StoreServerProcess::Start({.secret = kSecret});
  if (!server.ok()) {
    result.failed = ranks;
    result.first_error = server.status().ToString();
    return result;
  }
  const int port = (*server)->port();
  const std::vector<int> stranger_fds = Strangers(port, strangers);
  processes = std::max(1, std::min(processes, ranks));
  std::vector<pid_t> pids;
  std::vector<int> go_fds, result_fds;
  for (int p = 0; p < processes; ++p) {
    const int first = static_cast<int>(int64_t{ranks} * p / processes);
    const int count = static_cast<int>(int64_t{ranks} * (p + 1) / processes) - first;
    int go[2], back[2];
    if (::pipe(go) != 0 || ::pipe(back) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid == 0) {  // a client process: wait for the start, run its ranks, report, hold them until told
      ::close(go[1]);
      ::close(back[0]);
      for (int fd : stranger_fds) ::close(fd);
      int64_t start_ns = 0;
      if (!ReadAll(go[0], &start_ns, sizeof(start_ns))) std::_Exit(1);
      RankDriver driver(first, count, ranks, port, inflight, timeout);
      const ProcessResult r = driver.Run();
      (void)!::write(back[1], &r, sizeof(r));
      char byte;
      while (::read(go[0], &byte, 1) > 0) {
      }
      std::_Exit(0);
    }
    ::close(go[0]);
    ::close(back[1]);
    pids.push_back(pid);
    go_fds.push_back(go[1]);
    result_fds.push_back(back[0]);
  }
  const double cpu_before = (*server)->CpuSeconds();
  const int64_t start_ns = NowNs();
  for (int fd : go_fds) (void)!::write(fd, &start_ns, sizeof(start_ns));
  int64_t phase_end[kPhases] = {};
  for (int fd : result_fds) {
    ProcessResult r;
    if (!ReadAll(fd, &r, sizeof(r))) {
      result.failed += ranks / processes;
      if (result.first_error.empty()) result.first_error = "a client process died";
      continue;
    }
    for (int k = 0; k < kPhases; ++k) phase_end[k] = std::max(phase_end[k], r.phase_end_ns[k]);
    result.failed += r.failed;
    result.reconnects += r.reconnects;
    if (result.first_error.empty() && r.first_error[0] != '\0') result.first_error = r.first_error;
    ::close(fd);
  }
  int64_t previous = start_ns;
  for (int k = 0; k < kPhases; ++k) {
    result.phase_s[k] = (phase_end[k] - previous) / 1e9;
    previous = std::max(previous, phase_end[k]);
  }
  result.total_s = (previous - start_ns) / 1e9;
  result.server_cpu_s = (*server)->CpuSeconds() - cpu_before;
  result.server_peak_kib = (*server)->PeakRssKiB();  // every rank still connected
  result.server_threads = (*server)->Threads();
  for (int fd : go_fds) ::close(fd);
  for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  for (int fd : stranger_fds) ::close(fd);
  (*server)->Stop();
  return result;
}

// net.core.somaxconn: how many connections the kernel queues for one listener (4096 if unreadable).
int ListenBacklog() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int backlog = 0;
  return (in >> backlog) && backlog > 0 ? backlog : 4096;
}

int Main() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;  // the server process and the client processes inherit it
  ::setrlimit(RLIMIT_NOFILE, &limit);
  (void)internal::DeriveStoreKey(kSecret);  // once, before the clock starts: the client processes inherit it
  const int processes = absl::GetFlag(FLAGS_processes);
  int inflight = absl::GetFlag(FLAGS_inflight);
  // More connects in flight than the listen backlog holds (net.core.somaxconn caps listen()'s 65535)
  // makes the kernel drop SYNs, and each dropped one costs its client a 1 s retransmission timeout:
  // a rendezvous that looks slow because the clients queued wrongly, not because the server is slow.
  if (inflight <= 0) inflight = std::clamp(ListenBacklog() / std::max(processes, 1), 16, 1024);
  const int strangers = absl::GetFlag(FLAGS_strangers);
  const std::chrono::milliseconds timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  std::printf("rendezvous through one TCPStoreServer (event loop; authenticated; loopback), %d client processes, "
              "%d connecting at once in each, %d strangers; RLIMIT_NOFILE %llu (hard)\n",
              processes, inflight, strangers, static_cast<unsigned long long>(limit.rlim_max));
  std::printf("%8s %13s %9s %9s %9s %9s %11s %13s %8s %9s\n", "ranks", kPhaseNames[0], kPhaseNames[1],
              kPhaseNames[2], kPhaseNames[3], "total s", "server MiB", "server CPU s", "threads", "failed");
  std::vector<nlohmann::json> lines;
  for (absl::string_view field : absl::StrSplit(absl::GetFlag(FLAGS_ranks), ',', absl::SkipEmpty())) {
    int ranks = 0;
    if (!absl::SimpleAtoi(field, &ranks) || ranks < 1) {
      std::fprintf(stderr, "--ranks: '%.*s' is not a number of ranks\n", static_cast<int>(field.size()), field.data());
      return 2;
    }
    // The server holds one descriptor per rank (and stranger); each client process its share of the ranks.
    const rlim_t needed = static_cast<rlim_t>(ranks + strangers + 64);
    if (needed > limit.rlim_max) {
      std::printf("%8d   skipped: the server needs %llu descriptors, over the hard limit %llu (raise it: "
                  "`ulimit -Hn`, or nofile in /etc/security/limits.conf)\n",
                  ranks, static_cast<unsigned long long>(needed), static_cast<unsigned long long>(limit.rlim_max));
      continue;
    }
    const Result r = Rendezvous(ranks, processes, inflight, strangers, timeout);
    std::printf("%8d %12.2fs %8.2fs %8.2fs %8.2fs %9.2f %11.1f %13.2f %8d %9d\n", r.ranks, r.phase_s[0], r.phase_s[1],
                r.phase_s[2], r.phase_s[3], r.total_s, r.server_peak_kib / 1024.0, r.server_cpu_s, r.server_threads,
                r.failed);
    if (!r.first_error.empty()) std::printf("    first failure: %s\n", r.first_error.c_str());
    if (r.reconnects > 0) std::printf("    %d handshakes were retried (connection refused, reset or evicted)\n", r.reconnects);
    std::fflush(stdout);
    lines.push_back({{"bench", "rendezvous"}, {"store", "tinyddp"}, {"ranks", r.ranks}, {"processes", processes},
                     {"strangers", strangers}, {"connect_auth_s", r.phase_s[0]}, {"publish_s", r.phase_s[1]},
                     {"barrier_s", r.phase_s[2]}, {"id_broadcast_s", r.phase_s[3]}, {"total_s", r.total_s},
                     {"server_peak_kib", r.server_peak_kib}, {"server_cpu_s", r.server_cpu_s},
                     {"server_threads", r.server_threads}, {"failed", r.failed}, {"reconnects", r.reconnects}});
  }
  for (const auto& line : lines) std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  tinyddp::dist::testing::RunStoreServerChildIfAsked();
  absl::ParseCommandLine(argc, argv);
  return tinyddp::dist::Main();
}
