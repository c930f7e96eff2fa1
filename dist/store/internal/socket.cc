// Socket: see socket.h. Every blocking step goes through poll() with the time left until the
// deadline, so no call can hang: connect() is non-blocking, then polled for writability.
#include "dist/store/internal/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/kv_table.h"

namespace tinyddp::dist::internal {
namespace {

// Milliseconds left until `deadline` for poll(): -1 = no deadline, 0 = already past.
int PollTimeoutMs(SteadyTime deadline) {
  if (deadline == kNoDeadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

// Waits until fd is ready for `events`; DeadlineExceeded when the deadline passes first.
absl::Status WaitReady(int fd, short events, SteadyTime deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("socket ", what, " timed out"));
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("poll failed: ", ErrnoText(errno)));
  }
}

// A send or recv that failed only for now: interrupted, or nothing to move yet (poll again).
bool Retry(int err) { return err == EINTR || err == EAGAIN || err == EWOULDBLOCK; }

// One connect attempt to one address, bounded by `deadline`; the socket stays non-blocking (every
// later step polls first). Returns errno on failure.
int TryConnect(const addrinfo* ai, SteadyTime deadline, Socket* out) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (s.fd() < 0) return errno;
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    // An unreachable host that drops SYNs would block a blocking connect for minutes; poll instead.
    if (!WaitReady(s.fd(), POLLOUT, deadline, "connect").ok()) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  int one = 1;
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *out = std::move(s);
  return 0;
}

// A new socket bound to `addr`, in *out; returns 0 or the errno of what failed.
int BindTo(const sockaddr* addr, socklen_t len, bool dual_stack, Socket* out) {
  Socket s(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));  // the loop accepts until EAGAIN
  if (s.fd() < 0) return errno;
  int one = 1, zero = 0;
  // SO_REUSEADDR lets a restarted job reuse a port in TIME_WAIT; a live listener still gets EADDRINUSE.
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr->sa_family == AF_INET6) {
    ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one, sizeof(int));
  }
  if (::bind(s.fd(), addr, len) != 0) return errno;
  *out = std::move(s);
  return 0;
}

// Reads exactly n bytes before `deadline`; a closed connection is Unavailable ("peer closed").
absl::Status RecvAll(int fd, void* data, size_t n, SteadyTime deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    RETURN_IF_ERROR(WaitReady(fd, POLLIN, deadline, "receive"));
    const ssize_t got = ::recv(fd, p, n, MSG_DONTWAIT);
    if (got == 0) return absl::UnavailableError("peer closed the connection");
    if (got < 0 && !Retry(errno)) return absl::UnavailableError(absl::StrCat("receive failed: ", ErrnoText(errno)));
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ErrnoText(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<Socket> Listen(const std::string& ip, int port, int* bound_port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, " is out of range (0..65535; 0 = pick a free one)"));
  }
  const uint16_t net_port = htons(static_cast<uint16_t>(port));
  Socket s;
  int err = 0;
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = net_port;
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = net_port;
  if (ip.empty()) {
    // Prefer one dual-stack IPv6 socket (accepts IPv4 too); fall back to IPv4 where IPv6 is disabled.
    v6.sin6_addr = in6addr_any;
    err = BindTo(reinterpret_cast<sockaddr*>(&v6), sizeof(v6), /*dual_stack=*/true, &s);
    if (err != 0 && err != EADDRINUSE) {
      v4.sin_addr.s_addr = htonl(INADDR_ANY);
      err = BindTo(reinterpret_cast<sockaddr*>(&v4), sizeof(v4), false, &s);
    }
  } else if (::inet_pton(AF_INET, ip.c_str(), &v4.sin_addr) == 1) {
    err = BindTo(reinterpret_cast<sockaddr*>(&v4), sizeof(v4), false, &s);
  } else if (::inet_pton(AF_INET6, ip.c_str(), &v6.sin6_addr) == 1) {
    err = BindTo(reinterpret_cast<sockaddr*>(&v6), sizeof(v6), false, &s);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", ip, "' is not a numeric IP address to listen on"));
  }
  const std::string where = ip.empty() ? absl::StrCat("port ", port) : absl::StrCat(ip, ":", port);
  if (err == EADDRINUSE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "could not listen on ", where,
        ": address already in use (another job, or a previous run still exiting, holds it); "
        "choose another MASTER_PORT / --master_port, or 0 to pick a free port"));
  }
  if (err == EADDRNOTAVAIL) {
    return absl::NotFoundError(absl::StrCat("could not listen on ", where, ": ", ip,
                                            " is not an address of this machine"));
  }
  if (err != 0) return absl::InternalError(absl::StrCat("could not listen on ", where, ": ", ErrnoText(err)));
  // The backlog holds connections not yet accepted: a burst of 100,000 ranks connecting at once. The
  // kernel caps it at net.core.somaxconn (4096 by default); a SYN past it is retried a second later.
  if (::listen(s.fd(), 65535) != 0) {
    return absl::InternalError(absl::StrCat("listen on ", where, " failed: ", ErrnoText(errno)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return s;
}

absl::StatusOr<Socket> Connect(const std::string& host, int port, SteadyTime deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  if (gai == EAI_NONAME) {
    return absl::InvalidArgumentError(
        absl::StrCat("could not resolve host '", host, "': ", gai_strerror(gai), "; check MASTER_ADDR"));
  }
  if (gai != 0) return absl::UnavailableError(absl::StrCat("resolving '", host, "': ", gai_strerror(gai)));
  std::string last_error = "no address to connect to";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Socket s;
    const int err = TryConnect(ai, deadline, &s);
    if (err == 0) return s;
    last_error = ErrnoText(err);
  }
  return absl::UnavailableError(last_error);
}

absl::Status SendAll(int fd, const void* data, size_t n, SteadyTime deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    RETURN_IF_ERROR(WaitReady(fd, POLLOUT, deadline, "send"));
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && !Retry(errno)) return absl::UnavailableError(absl::StrCat("send failed: ", ErrnoText(errno)));
    if (sent > 0) {
      p += sent;
      n -= static_cast<size_t>(sent);
    }
  }
  return absl::OkStatus();
}

absl::Status SendFrame(int fd, const Bytes& body, SteadyTime deadline) {
  const uint32_t len = static_cast<uint32_t>(body.size());
  Bytes frame = {uint8_t(len), uint8_t(len >> 8), uint8_t(len >> 16), uint8_t(len >> 24)};
  frame.insert(frame.end(), body.begin(), body.end());  // one send: a small frame leaves as one packet
  return SendAll(fd, frame.data(), frame.size(), deadline);
}

absl::StatusOr<Bytes> RecvFrame(int fd, uint32_t max_bytes, SteadyTime deadline) {
  uint8_t header[4];
  RETURN_IF_ERROR(RecvAll(fd, header, 4, deadline));
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(header[i]) << (8 * i);
  if (len > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("a frame of ", FormatBytes(len), " is over the limit of ",
                                                     FormatBytes(max_bytes), " for this message"));
  }
  Bytes body(len);
  RETURN_IF_ERROR(RecvAll(fd, body.data(), len, deadline));
  return body;
}

}  // namespace tinyddp::dist::internal
