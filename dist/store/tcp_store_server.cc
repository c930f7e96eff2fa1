// TCPStoreServer: see tcp_store_server.h. One thread runs Loop(): epoll says which sockets are ready,
// ReadFrom cuts what arrives into frames, each frame is a step of the handshake or a request run against
// the table, and its answer goes into the connection's write buffer, sent as far as the socket takes it.
#include "dist/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store_secret.h"

namespace tinyddp::dist {

using internal::OkResponse;
using internal::StoreOp;
using internal::StoreRequest;

namespace {

// The numeric address to listen on for the job's store address, or "" for every interface
// (the table in tcp_store_server.h says why).
std::string ListenAddressFor(const std::string& host) {
  if (host == "localhost") return "127.0.0.1";
  if (host.empty() || host == "0.0.0.0" || host == "::") return "";
  in6_addr v6;
  in_addr v4;
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return host;
  return "";  // a host name
}

// Out of descriptors with no connection to close for room: accept again after this. Meanwhile new
// clients wait in the listen backlog, and the loop sleeps instead of spinning on accept's EMFILE.
constexpr std::chrono::milliseconds kAcceptPause(100);
// New connections taken per turn of the loop: a burst of connects does not starve those already open.
constexpr int kAcceptsPerTurn = 256;
// How often the loop looks for deadlines that have passed (a sweep of every connection: ~1 ms at 100k).
constexpr std::chrono::milliseconds kSweep(50);
constexpr std::chrono::seconds kRefusalLogInterval(10);

// The length a frame's 4-byte little-endian header declares. Precondition: in.size() >= 4.
uint32_t FrameLength(const Bytes& in) {
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(in[i]) << (8 * i);
  return len;
}

bool OutOfDescriptors(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

// The peer's numeric address and port, "127.0.0.1 port 51234", for the log of a refused client.
std::string PeerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown address";
  }
  return absl::StrCat(host, " port ", port);
}

// The response to a table call: its result after the OK, or its error.
Bytes Respond(const absl::Status& s) { return s.ok() ? OkResponse().Take() : internal::ErrorResponse(s); }
Bytes Respond(const absl::StatusOr<Bytes>& v) { return v.ok() ? OkResponse().Blob(*v).Take() : Respond(v.status()); }
Bytes Respond(const absl::StatusOr<int64_t>& v) { return v.ok() ? OkResponse().I64(*v).Take() : Respond(v.status()); }
Bytes Respond(const absl::StatusOr<bool>& v) { return v.ok() ? OkResponse().U8(*v).Take() : Respond(v.status()); }

// The table's limit: the options', else TINYDDP_STORE_MAX_BYTES, else the default.
absl::StatusOr<uint64_t> TableLimit(uint64_t from_options) {
  if (from_options > 0) return from_options;
  const char* text = std::getenv(kStoreMaxBytesEnv);
  if (text == nullptr || *text == '\0') return kDefaultStoreMaxBytes;
  uint64_t bytes = 0;
  if (absl::SimpleAtoi(text, &bytes) && bytes > 0) return bytes;
  return absl::InvalidArgumentError(absl::StrCat(kStoreMaxBytesEnv, "='", text, "': expected a number of bytes, e.g. ",
                                                 kStoreMaxBytesEnv, "=$((256 << 20)) for 256 MiB"));
}

std::string DescriptorLimitText() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return absl::StrCat("the store server's process is at its file-descriptor limit (RLIMIT_NOFILE ", limit.rlim_cur,
                      ", hard limit ", limit.rlim_max, "), one per connection: raise the hard limit where the "
                      "launcher (or rank 0) starts (`ulimit -Hn`, LimitNOFILE= in systemd, nofile in "
                      "/etc/security/limits.conf); the server raises its soft limit to it");
}

}  // namespace

TCPStoreServer::TCPStoreServer(const TCPStoreServerOptions& options)
    : options_(options), key_(internal::DeriveStoreKey(options.secret)), table_(options.max_table_bytes) {}

absl::StatusOr<std::unique_ptr<TCPStoreServer>> TCPStoreServer::Start(const TCPStoreServerOptions& given) {
  TCPStoreServerOptions options = given;
  ASSIGN_OR_RETURN(options.max_table_bytes, TableLimit(given.max_table_bytes));
  std::unique_ptr<TCPStoreServer> server(new TCPStoreServer(options));
  std::string ip = ListenAddressFor(options.host);
  auto listener = internal::Listen(ip, options.port, &server->port_);
  const bool asked_for_all = options.host.empty() || options.host == "0.0.0.0" || options.host == "::";
  server->listening_on_ = !ip.empty()     ? ip
                          : asked_for_all ? "every interface"
                                          : absl::StrCat("every interface (", options.host, " is a host name)");
  if (!listener.ok() && absl::IsNotFound(listener.status())) {
    listener = internal::Listen("", options.port, &server->port_);
    server->listening_on_ = absl::StrCat("every interface (", ip, " is not an address of this machine: NAT?)");
    ip.clear();
  }
  RETURN_IF_ERROR(listener);
  server->listener_ = std::move(*listener);
  server->local_address_ = ip.empty() ? "127.0.0.1" : ip;
  // Every connection is a descriptor, so the soft RLIMIT_NOFILE (often 1024) would cap a job at ~1,000
  // ranks: raise it to the hard limit, which only an administrator can raise further.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    const rlim_t was = std::exchange(limit.rlim_cur, limit.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) {
      server->Log(absl::StrCat("raised the file-descriptor limit (RLIMIT_NOFILE) from ", was, " to its hard limit ",
                               limit.rlim_max, ": the store holds one descriptor per connection"));
    }
  }
  server->epoll_ = internal::Socket(::epoll_create1(EPOLL_CLOEXEC));
  server->stop_event_ = internal::Socket(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  server->reserve_fd_ = internal::Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (server->epoll_.fd() < 0 || server->stop_event_.fd() < 0) {
    return absl::InternalError(absl::StrCat("store server: epoll/eventfd failed: ", internal::ErrnoText(errno)));
  }
  epoll_event listen{EPOLLIN, {.fd = server->listener_.fd()}}, stop{EPOLLIN, {.fd = server->stop_event_.fd()}};
  ::epoll_ctl(server->epoll_.fd(), EPOLL_CTL_ADD, server->listener_.fd(), &listen);
  ::epoll_ctl(server->epoll_.fd(), EPOLL_CTL_ADD, server->stop_event_.fd(), &stop);
  if (!options.secret.empty() && options.secret.size() < kShortStoreSecretBytes) {
    server->Log(absl::StrCat("warning: the job secret is only ", options.secret.size(), " bytes; one guessable from a "
                             "captured handshake protects little. Use e.g. `openssl rand -hex 32`"));
  }
  TCPStoreServer* raw = server.get();
  server->thread_ = std::thread([raw] { raw->Loop(); });
  return server;
}

TCPStoreServer::~TCPStoreServer() {
  const uint64_t one = 1;
  if (stop_event_.fd() >= 0) (void)!::write(stop_event_.fd(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  // Refusals since the last line would otherwise be lost when the job ends within 10 s of it.
  if (refusals_not_logged_ > 0) {
    Log(absl::StrCat("refused ", refusals_not_logged_, " more connection(s) after the one logged above"));
  }
}

void TCPStoreServer::Log(const std::string& line) const {
  std::fprintf(stderr, "store server (port %d): %s\n", port_, line.c_str());
}

void TCPStoreServer::LogRefusal(int fd, const absl::Status& why) {
  const auto now = Clock::now();
  if (now < next_refusal_log_) {
    ++refusals_not_logged_;
    return;
  }
  Log(absl::StrCat("refused a connection from ", PeerAddress(fd), ": ", why.message(),
                   refusals_not_logged_ > 0 ? absl::StrCat(" (and ", refusals_not_logged_, " more before it)") : ""));
  refusals_not_logged_ = 0;
  next_refusal_log_ = now + kRefusalLogInterval;
}

// --- The loop ------------------------------------------------------------------------------------------

void TCPStoreServer::Loop() {
  std::vector<epoll_event> events(1024);
  while (true) {
    // Sleep until a socket is ready, or the next sweep while deadlines (a hello, a frame, an answer, a Wait)
    // are armed: idle connections cost no wake-ups.
    const bool idle = next_sweep_ == Clock::time_point::max() && accept_paused_until_ == Clock::time_point{};
    const int n = ::epoll_wait(epoll_.fd(), events.data(), static_cast<int>(events.size()), idle ? -1 : kSweep.count());
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_event_.fd()) return;  // the connections close with connections_: clients see the end
      fd == listener_.fd() ? Accept() : OnEvent(fd, events[i].events);
    }
    if (accept_paused_until_ != Clock::time_point{} && Clock::now() >= accept_paused_until_) Accept();
    Expire();
    for (auto [fd, serial] : std::exchange(resumed_, {})) {  // requests read while a Get/Wait was parked
      auto it = connections_.find(fd);
      if (it != connections_.end() && it->second.serial == serial && !it->second.in.empty()) ReadFrom(it->second);
    }
  }
}

void TCPStoreServer::Accept() {
  if (accept_paused_until_ != Clock::time_point{}) {  // resuming: the listener goes back into epoll
    accept_paused_until_ = {};
    epoll_event ev{EPOLLIN, {.fd = listener_.fd()}};
    ::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, listener_.fd(), &ev);
  }
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (OutOfDescriptors(errno)) AcceptAtTheLimit();
      return;  // EAGAIN: nobody else waits; anything else: that client gave up, the next turn serves others
    }
    if (std::exchange(out_of_descriptors_, false)) Log("accepting connections again");
    Admit(fd);
  }
}

void TCPStoreServer::Admit(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (pending_count_ >= options_.max_pending_hellos) MakeRoom();
  Connection& c = connections_[fd];
  c.socket = internal::Socket(fd);
  c.serial = ++next_serial_;
  ++pending_count_;
  ++open_;
  Watch(c);
  next_sweep_ = std::min(next_sweep_, c.deadline = Clock::now() + options_.hello_timeout);
}

// At the descriptor limit accept() fails whether or not a client waits. The descriptor kept in reserve
// makes room to find out. A client that waits gets in by closing the oldest connection still owing its
// handshake (the likeliest stranger: an honest client completes it within two round trips); with none,
// it is told the limit and how to raise it, and accepting pauses for kAcceptPause.
void TCPStoreServer::AcceptAtTheLimit() {
  reserve_fd_.Close();
  const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0 && !std::exchange(out_of_descriptors_, true)) {
    Log(absl::StrCat("cannot accept a connection (too many open files) with ", open_.load(), " open: ",
                     DescriptorLimitText()));
  }
  if (fd >= 0 && MakeRoom()) {
    Admit(fd);
  } else if (fd >= 0) {
    internal::Socket client(fd);
    char drain[1024];  // what it sent already: closing with unread bytes would reset the connection
    while (::recv(fd, drain, sizeof(drain), 0) > 0) {
    }
    const absl::Status full = absl::ResourceExhaustedError(DescriptorLimitText());
    (void)internal::SendFrame(fd, internal::ErrorResponse(full), Clock::now());
    LogRefusal(fd, full);
    accept_paused_until_ = Clock::now() + kAcceptPause;
    ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, listener_.fd(), nullptr);
  }
  reserve_fd_ = internal::Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

// Closes the oldest connection still owing its handshake (a scan: it happens only under a flood of
// strangers or at the descriptor limit). False when there is none.
bool TCPStoreServer::MakeRoom() {
  const Connection* oldest = nullptr;
  for (const auto& [fd, c] : connections_) {
    if (c.stage != Stage::kServing && (oldest == nullptr || c.serial < oldest->serial)) oldest = &c;
  }
  if (oldest != nullptr) Close(oldest->socket.fd());
  return oldest != nullptr;
}

void TCPStoreServer::OnEvent(int fd, uint32_t events) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if ((events & (EPOLLHUP | EPOLLERR)) || ((events & EPOLLRDHUP) && !(events & EPOLLIN))) {
    return Close(fd);  // gone: a parked Get/Wait ends here, not at its deadline
  }
  if (events & EPOLLOUT) Flush(c);
  if (connections_.count(fd) > 0 && c.out.empty() && !c.waiting) ReadFrom(c);
}

// Reads what has arrived and runs each whole frame, until the socket is empty, an answer waits to be sent
// or a Get/Wait is parked: one answer at a time per client.
void TCPStoreServer::ReadFrom(Connection& c) {
  const int fd = c.socket.fd();
  const uint64_t serial = c.serial;
  uint8_t chunk[64 << 10];
  bool eof = false;
  while (true) {
    // Whole frames first; a frame's length is checked as soon as its 4 bytes are here.
    while (c.in.size() >= 4 && c.out.empty() && !c.waiting) {
      const uint32_t len = FrameLength(c.in);
      const bool hello = c.stage != Stage::kServing;
      if (len > (hello ? internal::kMaxHelloBytes : internal::kMaxRequestBytes)) {
        const absl::Status why =
            hello ? absl::UnauthenticatedError("this is a tinyddp store server: a connection must begin with its handshake")
                  : absl::InvalidArgumentError(absl::StrCat(
                        "store request refused: a frame of ", internal::FormatBytes(len), " is over the limit of ",
                        internal::FormatBytes(internal::kMaxRequestBytes), " (kMaxRequestBytes; values are limited to ",
                        internal::FormatBytes(kMaxStoreValueBytes), "); the connection is closed"));
        if (hello) LogRefusal(fd, why);
        c.close_when_sent = true;
        return Send(c, internal::ErrorResponse(why));
      }
      if (c.in.size() < 4 + size_t{len}) break;
      Bytes frame;
      if (c.in.size() == 4 + size_t{len}) {  // the usual case: the buffer becomes the frame, no copy
        frame.swap(c.in);
        frame.erase(frame.begin(), frame.begin() + 4);
      } else {
        frame.assign(c.in.begin() + 4, c.in.begin() + 4 + len);
        c.in.erase(c.in.begin(), c.in.begin() + 4 + len);
      }
      hello ? HandleHandshake(c, std::move(frame)) : Handle(c, std::move(frame));
      auto it = connections_.find(fd);
      if (it == connections_.end() || it->second.serial != serial) return;  // closed meanwhile
    }
    if (eof) return Close(fd);
    if (!c.out.empty() || c.waiting) break;
    const ssize_t got = ::recv(fd, chunk, sizeof(chunk), 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    if ((eof = got <= 0)) continue;  // run what it sent before hanging up, then close
    // Grow with what arrives, never past the declared end: declaring 16 MiB and sending 10 bytes costs 64 KiB.
    const size_t need = c.in.size() + got, declared = c.in.size() < 4 ? 0 : 4 + size_t{FrameLength(c.in)};
    if (need > c.in.capacity()) c.in.reserve(std::max(need, std::min(2 * c.in.capacity(), declared)));
    c.in.insert(c.in.end(), chunk, chunk + got);
  }
  // Part of a frame is here: the rest is due within frame_timeout (before the handshake, by its deadline).
  if (c.stage == Stage::kServing && !c.waiting && c.out.empty()) {
    c.deadline = c.in.empty() ? Clock::time_point::max() : std::min(c.deadline, Clock::now() + options_.frame_timeout);
    next_sweep_ = std::min(next_sweep_, c.deadline);
  }
  if (c.in.empty()) Bytes().swap(c.in);  // an idle connection holds no buffer
  Watch(c);
}

void TCPStoreServer::HandleHandshake(Connection& c, Bytes frame) {
  absl::StatusOr<Bytes> reply = c.stage == Stage::kHello ? internal::ServerChallenge(std::move(frame), &c.nonces)
                                                         : internal::ServerAnswer(std::move(frame), key_, c.nonces);
  if (!reply.ok()) {
    LogRefusal(c.socket.fd(), reply.status());
    c.close_when_sent = true;  // the peer said something: tell it why not, then close
    return Send(c, internal::ErrorResponse(reply.status()));
  }
  if (c.stage == Stage::kProof) {
    --pending_count_;
    Bytes().swap(c.nonces);
    c.deadline = Clock::time_point::max();
  }
  c.stage = c.stage == Stage::kHello ? Stage::kProof : Stage::kServing;
  Send(c, *reply);
}

void TCPStoreServer::Handle(Connection& c, Bytes body) {
  auto parsed = internal::ParseRequest(std::move(body));
  if (!parsed.ok()) return Send(c, internal::ErrorResponse(parsed.status()));
  StoreRequest& r = *parsed;
  switch (r.op) {
    case StoreOp::kHello:
    case StoreOp::kProof:
      return Send(c, internal::ErrorResponse(absl::InvalidArgumentError("store: a handshake message after the handshake")));
    case StoreOp::kSet:  // the value is moved: 16 MiB are not copied again
      Send(c, Respond(table_.Set(r.key, std::move(r.value))));
      return WakeWaiters(r.key);
    case StoreOp::kAdd:
      Send(c, Respond(table_.Add(r.key, r.number)));
      return WakeWaiters(r.key);
    case StoreOp::kCompareSet:
      Send(c, Respond(table_.CompareSet(r.key, r.expected, r.value)));
      return WakeWaiters(r.key);
    case StoreOp::kDelete:
      return Send(c, Respond(table_.Delete(r.key)));
    case StoreOp::kNumKeys:
      return Send(c, Respond(absl::StatusOr<int64_t>(table_.NumKeys())));
    case StoreOp::kGet:
    case StoreOp::kWait: {
      absl::Status valid = r.op == StoreOp::kGet ? internal::CheckKey(r.key) : internal::CheckWaitKeys(r.keys);
      if (!valid.ok()) return Send(c, Respond(valid));
      if (r.op == StoreOp::kGet) r.keys = {r.key};
      next_sweep_ = std::min(next_sweep_, c.deadline = internal::DeadlineAfter(std::chrono::milliseconds(r.number)));
      c.waiting = std::make_unique<StoreRequest>(std::move(r));
      c.checked = 0;
      return Resume(c);
    }
  }
}

// Checks a Get/Wait's keys from where it left off: all there, it is answered; else it is parked under
// the first missing key, whose Set (Add, CompareSet) brings it back here. Nothing is polled.
void TCPStoreServer::Resume(Connection& c) {
  StoreRequest& r = *c.waiting;
  while (c.checked < r.keys.size() && table_.Find(r.keys[c.checked]) != nullptr) ++c.checked;
  if (c.checked < r.keys.size()) {
    c.waiting_on = r.keys[c.checked];
    waiters_[c.waiting_on].insert(c.socket.fd());
    return;
  }
  const Bytes* value = r.op == StoreOp::kGet ? table_.Find(r.key) : nullptr;
  Answered(c, value != nullptr ? OkResponse().Blob(*value).Take() : OkResponse().Take());
}

// Ends a Get/Wait. Requests its client sent meanwhile run from Loop, not inside another's request.
void TCPStoreServer::Answered(Connection& c, const Bytes& answer) {
  c.waiting.reset();
  c.deadline = Clock::time_point::max();
  resumed_.emplace_back(c.socket.fd(), c.serial);
  Send(c, answer);
}

void TCPStoreServer::WakeWaiters(const std::string& key) {
  auto woken = waiters_.extract(key);  // taken out first: Resume may park some of them again
  if (woken.empty()) return;
  for (int fd : woken.mapped()) {
    auto c = connections_.find(fd);
    if (c != connections_.end() && c->second.waiting) Resume(c->second);
  }
}

// Takes a parked Get/Wait off the key it waits for.
void TCPStoreServer::Unpark(Connection& c) {
  auto w = waiters_.find(c.waiting_on);
  if (w != waiters_.end() && w->second.erase(c.socket.fd()) > 0 && w->second.empty()) waiters_.erase(w);
}

// --- Writing, deadlines, closing -----------------------------------------------------------------------

void TCPStoreServer::Send(Connection& c, const Bytes& body) {
  const uint32_t len = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) c.out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  c.out.insert(c.out.end(), body.begin(), body.end());
  Flush(c);
}

// Sends what the socket takes. The rest waits for EPOLLOUT, and must be taken within frame_timeout.
void TCPStoreServer::Flush(Connection& c) {
  size_t sent = 0;
  while (sent < c.out.size()) {
    const ssize_t n = ::send(c.socket.fd(), c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    if (n <= 0) return Close(c.socket.fd());
    sent += static_cast<size_t>(n);
  }
  c.out.erase(c.out.begin(), c.out.begin() + sent);
  if (c.out.empty()) {
    Bytes().swap(c.out);
    if (c.close_when_sent) return Close(c.socket.fd());
    if (c.stage == Stage::kServing && !c.waiting && c.in.empty()) c.deadline = Clock::time_point::max();
  } else if (!(c.events & EPOLLOUT)) {
    next_sweep_ = std::min(next_sweep_, c.deadline = std::min(c.deadline, Clock::now() + options_.frame_timeout));
  }
  Watch(c);
}

// Tells epoll what to watch: the answer draining, else the next request (none while a Get/Wait is parked).
void TCPStoreServer::Watch(Connection& c) {
  const uint32_t want = !c.out.empty() ? EPOLLOUT | EPOLLRDHUP : c.waiting ? EPOLLRDHUP : EPOLLIN | EPOLLRDHUP;
  if (want == c.events) return;
  epoll_event ev{want, {.fd = c.socket.fd()}};
  ::epoll_ctl(epoll_.fd(), c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.socket.fd(), &ev);
  c.events = want;
}

// Deadlines that have passed: a parked Get/Wait is answered DeadlineExceeded (naming what is missing);
// a handshake, a frame or an answer still unfinished closes its connection.
void TCPStoreServer::Expire() {
  const auto now = Clock::now();
  if (now < next_sweep_) return;
  next_sweep_ = Clock::time_point::max();
  std::vector<int> due;
  for (auto& [fd, c] : connections_) {
    if (c.deadline <= now) due.push_back(fd);
    if (c.deadline != Clock::time_point::max()) next_sweep_ = now + kSweep;
  }
  for (int fd : due) {
    auto it = connections_.find(fd);
    if (it == connections_.end() || !it->second.waiting) {
      Close(fd);
      continue;
    }
    Connection& c = it->second;
    const StoreRequest& r = *c.waiting;
    std::vector<std::string> missing(r.keys.begin() + c.checked, r.keys.end());
    missing.erase(std::remove_if(missing.begin(), missing.end(), [this](const std::string& k) { return table_.Find(k); }),
                  missing.end());
    const std::chrono::milliseconds timeout(r.number);
    Unpark(c);
    Answered(c, internal::ErrorResponse(r.op == StoreOp::kGet ? internal::GetTimedOut(r.key, timeout)
                                                              : internal::WaitTimedOut(missing, timeout)));
  }
}

void TCPStoreServer::Close(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (it->second.waiting) Unpark(it->second);
  if (it->second.stage != Stage::kServing) --pending_count_;
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(it);  // closes the socket
  --open_;
}

}  // namespace tinyddp::dist
