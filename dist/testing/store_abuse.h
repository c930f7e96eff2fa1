// Abusing a TCPStoreServer for real: raw connections that speak the wire protocol by hand (or garble
// it), and a server in a process of its own whose memory, threads and CPU time can be read from /proc.
// Shared by dist/store/tcp_store_abuse_test.cc (does the server keep serving honest clients?) and
// bench/store_abuse_rss.cc (what does the abuse cost it in memory?).
#ifndef TINYDDP_DIST_TESTING_STORE_ABUSE_H_
#define TINYDDP_DIST_TESTING_STORE_ABUSE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/store/internal/socket.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store.h"

namespace tinyddp::dist::testing {

/// A raw TCP connection to a store server on 127.0.0.1. Nothing is sent unless asked, not even the hello.
class RawStoreConnection {
 public:
  /// Connects (retrying for up to 30 s while the port refuses).
  static absl::StatusOr<RawStoreConnection> Connect(int port);

  absl::Status SendBytes(const void* data, size_t n);
  /// A frame: the 4-byte length, then `body`.
  absl::Status SendFrame(const Bytes& body);
  /// Sends `request` as a frame and reads the response: the server's answer as a Status (OK, or its
  /// error and message); a transport failure comes back as Unavailable or DeadlineExceeded.
  absl::Status Call(const internal::StoreRequest& request,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Reads one response frame (see Call).
  absl::Status ReadResponse(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// The handshake a real client runs, with `secret` (internal/store_protocol.h): OK, or why it failed.
  absl::Status Hello(const std::string& secret);
  /// Only the handshake's first message (the hello, with a fresh nonce); the answer is left unread.
  absl::Status SendHelloOnly();
  /// Waits up to `timeout` for the server to close the connection; true if it did.
  bool ClosedByServerWithin(std::chrono::milliseconds timeout);
  int fd() const { return socket_.fd(); }

 private:
  internal::Socket socket_;
};

struct StoreServerProcessOptions {
  std::string secret;  // the job secret the server requires ("" = none)
  int spare_fds = 0;   // > 0: RLIMIT_NOFILE = what the server needs to start, plus this many
};

/// A TCPStoreServer in a child process (this binary re-executed; main() must call
/// RunStoreServerChildIfAsked first). The child serves until Stop() or destruction.
class StoreServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<StoreServerProcess>> Start(const StoreServerProcessOptions& options);
  ~StoreServerProcess();

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  /// Resident memory now, and its peak since the start (VmRSS and VmHWM of /proc/PID/status), KiB.
  int64_t RssKiB() const;
  int64_t PeakRssKiB() const;
  /// User + system CPU time the server has used so far.
  double CpuSeconds() const;
  int Threads() const;
  /// Waits up to `timeout` until every thread of the server is asleep (blocked in a system call), twice
  /// in a row: after sending it work, it has then done all it will do with it. False on timeout.
  bool WaitUntilQuiet(std::chrono::milliseconds timeout) const;
  /// What the server wrote to stderr so far.
  std::string Stderr() const;
  /// Ends the child (closes its stdin) and returns its exit code (128 + signal if killed by one).
  int Stop();

 private:
  StoreServerProcess() = default;
  std::string StatusField(const char* name) const;

  pid_t pid_ = -1;
  int port_ = 0;
  int stdin_fd_ = -1;  // the child serves until this closes
  std::string stderr_path_;
};

/// Call first in main(): when this process is a StoreServerProcess child, it serves and exits.
void RunStoreServerChildIfAsked();

}  // namespace tinyddp::dist::testing

#endif  // TINYDDP_DIST_TESTING_STORE_ABUSE_H_
