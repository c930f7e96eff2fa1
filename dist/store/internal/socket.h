// Socket: the few TCP operations the store needs, over POSIX sockets, each bounded by a deadline:
// listening on a port, connecting with retry and exponential backoff, and length-prefixed frames
// (a 4-byte little-endian length, then the body) so every message arrives whole.
#ifndef TINYDDP_DIST_STORE_INTERNAL_SOCKET_H_
#define TINYDDP_DIST_STORE_INTERNAL_SOCKET_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

using SteadyTime = std::chrono::steady_clock::time_point;
/// A deadline meaning "wait until the peer or a shutdown() ends the wait".
inline constexpr SteadyTime kNoDeadline = SteadyTime::max();

/// An owned file descriptor of a socket; closes it on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.Release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { Close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Close();

 private:
  int fd_ = -1;
};

/// Listens on `port` (0 = a free port the kernel picks) on every local address, IPv6 and IPv4.
/// A port in use gives FailedPrecondition saying so and what to do. *bound_port receives the port.
absl::StatusOr<Socket> Listen(int port, int* bound_port);

/// Connects to host:port, retrying refused/unreachable attempts with exponential backoff
/// (10 ms doubling to 1 s) until `timeout`. The error names host, port, timeout and the last errno.
absl::StatusOr<Socket> ConnectWithRetry(const std::string& host, int port, std::chrono::milliseconds timeout);

/// Writes all n bytes before `deadline`. Never raises SIGPIPE (a dead peer is an error, not a signal).
absl::Status SendAll(int fd, const void* data, size_t n, SteadyTime deadline);
/// Reads exactly n bytes before `deadline`; a closed connection is Unavailable ("peer closed").
absl::Status RecvAll(int fd, void* data, size_t n, SteadyTime deadline);

/// One frame = 4-byte little-endian length + body. Bodies over 1 GiB are refused as corrupt.
absl::Status SendFrame(int fd, const Bytes& body, SteadyTime deadline);
absl::StatusOr<Bytes> RecvFrame(int fd, SteadyTime deadline);

/// The errno text, e.g. "connection refused".
std::string ErrnoText(int err);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_SOCKET_H_
