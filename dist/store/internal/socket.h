// Socket: the few TCP operations the store needs, over POSIX sockets, each bounded by a deadline:
// listening on an address and port, connecting, and length-prefixed frames (a 4-byte little-endian
// length, then the body) so every message arrives whole.
#ifndef TINYDDP_DIST_STORE_INTERNAL_SOCKET_H_
#define TINYDDP_DIST_STORE_INTERNAL_SOCKET_H_

#include <chrono>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

using SteadyTime = std::chrono::steady_clock::time_point;
/// A deadline meaning "wait until the peer or a shutdown() ends the wait".
inline constexpr SteadyTime kNoDeadline = SteadyTime::max();

/// An owned file descriptor of a socket (-1 for none); closes it on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept { std::swap(fd_, other.fd_); }
  Socket& operator=(Socket&& other) noexcept {  // our old descriptor closes with `other`
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Socket() { Close(); }

  int fd() const { return fd_; }
  void Close();

 private:
  int fd_ = -1;
};

/// Listens on `ip` (a numeric IPv4/IPv6 address; "" = every local address, IPv6 and IPv4) and `port`
/// (0 = a free port the kernel picks); *bound_port receives the port. The listener is non-blocking.
/// Errors: a port in use is FailedPrecondition saying so and what to do; an address this machine
/// does not have is NotFound; a non-numeric `ip` is InvalidArgument.
absl::StatusOr<Socket> Listen(const std::string& ip, int port, int* bound_port);

/// Connects to host:port: one attempt at each address the name resolves to, each bounded by `deadline`.
/// A name that does not resolve is InvalidArgument; a failed attempt is Unavailable with its errno text
/// ("connection refused"). Retrying until a timeout is the caller's (TCPStore's, with backoff).
absl::StatusOr<Socket> Connect(const std::string& host, int port, SteadyTime deadline);

/// Writes all n bytes before `deadline`. Never raises SIGPIPE (a dead peer is an error, not a signal).
absl::Status SendAll(int fd, const void* data, size_t n, SteadyTime deadline);

/// One frame = 4-byte little-endian length + body.
absl::Status SendFrame(int fd, const Bytes& body, SteadyTime deadline);
/// Reads one frame before `deadline` (the client's side: the server reads frames in its event loop).
/// A declared length over `max_bytes` is ResourceExhausted, before any of the body is read.
absl::StatusOr<Bytes> RecvFrame(int fd, uint32_t max_bytes, SteadyTime deadline);

/// The errno text, e.g. "connection refused".
std::string ErrnoText(int err);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_SOCKET_H_
