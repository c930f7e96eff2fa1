// Socket: see socket.h. Every blocking step goes through poll() with the time left until the
// deadline, so no call can hang: connect() is non-blocking, then polled for writability.
#include "dist/store/internal/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
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
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/kv_table.h"

namespace tinyddp::dist::internal {
namespace {

constexpr uint32_t kMaxFrame = 1u << 30;

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

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// One non-blocking connect attempt to one address, bounded by `deadline`. Returns errno on failure.
int TryConnect(const addrinfo* ai, SteadyTime deadline, Socket* out) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (!s.valid()) return errno;
  int flags = ::fcntl(s.fd(), F_GETFL, 0);
  ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK);
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    // An unreachable host that drops SYNs would block a blocking connect for minutes; poll instead.
    if (!WaitReady(s.fd(), POLLOUT, deadline, "connect").ok()) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  ::fcntl(s.fd(), F_SETFL, flags);
  SetNoDelay(s.fd());
  *out = std::move(s);
  return 0;
}

}  // namespace

std::string ErrnoText(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.Release();
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<Socket> Listen(int port, int* bound_port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, " is out of range (0..65535; 0 = pick a free one)"));
  }
  // Prefer one dual-stack IPv6 socket (accepts IPv4 too); fall back to IPv4 where IPv6 is disabled.
  Socket s(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int bind_rc = -1;
  int one = 1, zero = 0;
  if (s.valid()) {
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    bind_rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
    if (bind_rc != 0 && errno == EADDRINUSE) bind_rc = -2;
  }
  if (bind_rc == -1) {
    s = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) return absl::InternalError(absl::StrCat("socket() failed: ", ErrnoText(errno)));
    // SO_REUSEADDR lets a restarted job reuse a port in TIME_WAIT; a live listener still gets EADDRINUSE.
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bind_rc = ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
    if (bind_rc != 0 && errno == EADDRINUSE) bind_rc = -2;
  }
  if (bind_rc == -2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "could not listen on port ", port,
        ": address already in use (another job, or a previous run still exiting, holds it); "
        "choose another MASTER_PORT / --master_port, or 0 to pick a free port"));
  }
  if (bind_rc != 0) {
    return absl::InternalError(absl::StrCat("could not bind port ", port, ": ", ErrnoText(errno)));
  }
  if (::listen(s.fd(), 1024) != 0) {
    return absl::InternalError(absl::StrCat("listen on port ", port, " failed: ", ErrnoText(errno)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return s;
}

absl::StatusOr<Socket> ConnectWithRetry(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const SteadyTime deadline = DeadlineAfter(timeout);
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "no attempt finished";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const std::string port_text = std::to_string(port);
    int gai = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &list);
    if (gai == EAI_NONAME) {
      return absl::InvalidArgumentError(
          absl::StrCat("could not resolve host '", host, "': ", gai_strerror(gai), "; check MASTER_ADDR"));
    }
    if (gai != 0) {
      last_error = absl::StrCat("resolving '", host, "': ", gai_strerror(gai));
    } else {
      for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        Socket s;
        int err = TryConnect(ai, deadline, &s);
        if (err == 0) {
          ::freeaddrinfo(list);
          return s;
        }
        last_error = ErrnoText(err);
      }
      ::freeaddrinfo(list);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline - now));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
  }
  return absl::UnavailableError(absl::StrCat("could not connect to ", host, ":", port, " within ",
                                             FormatDuration(timeout), ": ", last_error));
}

absl::Status SendAll(int fd, const void* data, size_t n, SteadyTime deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      p += sent;
      n -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(WaitReady(fd, POLLOUT, deadline, "send"));
      continue;
    }
    return absl::UnavailableError(absl::StrCat("send failed: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t n, SteadyTime deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    RETURN_IF_ERROR(WaitReady(fd, POLLIN, deadline, "receive"));
    ssize_t got = ::recv(fd, p, n, MSG_DONTWAIT);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return absl::UnavailableError("peer closed the connection");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return absl::UnavailableError(absl::StrCat("receive failed: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::Status SendFrame(int fd, const Bytes& body, SteadyTime deadline) {
  uint8_t header[4];
  const uint32_t len = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) header[i] = static_cast<uint8_t>(len >> (8 * i));
  RETURN_IF_ERROR(SendAll(fd, header, 4, deadline));
  return SendAll(fd, body.data(), body.size(), deadline);
}

absl::StatusOr<Bytes> RecvFrame(int fd, SteadyTime deadline) {
  uint8_t header[4];
  absl::Status s = RecvAll(fd, header, 4, deadline);
  RETURN_IF_ERROR(s);
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(header[i]) << (8 * i);
  if (len > kMaxFrame) {
    return absl::DataLossError(absl::StrCat("received a frame of ", len,
                                            " bytes: not a tinyddp store peer (wrong MASTER_PORT?)"));
  }
  Bytes body(len);
  s = RecvAll(fd, body.data(), len, deadline);
  RETURN_IF_ERROR(s);
  return body;
}

}  // namespace tinyddp::dist::internal
