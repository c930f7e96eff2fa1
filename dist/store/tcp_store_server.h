// TCPStoreServer: the rendezvous server every rank's TCPStore client talks to. It runs on background
// threads inside rank 0's process (TCPStore with is_server) or inside the launcher, which keeps it up
// for the whole job so workers can come and go. Keys live in one in-memory table (internal/kv_table.h).
//
// One thread per connection: a blocking Get or Wait blocks only its own connection's thread. Jobs have at
// most a few thousand ranks, each keeping a handful of connections, so this stays cheap and easy to read.
//
// Nothing a client sends may take the launcher down or lock the job's ranks out: every connection must
// first prove it knows the job secret (the handshake, internal/store_protocol.h), and everything it may
// do is bounded by the limits below and store.h's. A refused client is told why and logged (at most once
// per 10 s, with a count of the others, the last count as the server stops); out of file descriptors, the
// server pauses accepting (with a message) instead of spinning; a Get or Wait whose client hangs up ends at
// once. Errors go back as a response; the server carries on.
//
// Where it listens, from the address the job uses for the store (MASTER_ADDR, TCPStoreServerOptions::host):
//   "127.0.0.1", "::1", "localhost"   loopback only: nothing off this machine can connect (one-node jobs)
//   an IP address of this machine     that address only (the one the other nodes use)
//   an IP address it does not have    every interface: a NAT or cloud address, whose traffic arrives on
//                                     a private address of this machine
//   a host name, "", "0.0.0.0", "::"  every interface: a name may resolve to 127.0.1.1 here and to the
//                                     real address on the other nodes, so no single address is right
#ifndef TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_
#define TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "dist/store/internal/kv_table.h"
#include "dist/store/internal/socket.h"

namespace tinyddp::dist {

/// An honest client completes the handshake right after connecting; one that takes this long is not one.
/// Until then nothing over kMaxHelloBytes is read from it.
inline constexpr std::chrono::milliseconds kHelloTimeout = std::chrono::seconds(10);
/// Once a request's first byte arrives, the rest must follow within this: the largest request (33 MiB,
/// kMaxRequestBytes) needs 0.6 MB/s. A client that trickles bytes to hold a thread (slowloris) is
/// disconnected. A request's buffer grows with the bytes that arrive, never to the length it declares.
inline constexpr std::chrono::milliseconds kFrameTimeout = std::chrono::seconds(60);
/// Connections open at once: one or two per rank of a few-thousand-rank job. Each costs a thread, about
/// 11 KiB resident once its handshake is done (bench/store_abuse_rss: 8000 idle connections, 99 MiB in
/// all), so the limit keeps the launcher near 100 MB. Past it, new clients are told the server is full.
inline constexpr int kMaxConnections = 8192;
/// Connections that have not completed the handshake yet. When full, a new one evicts the oldest: an
/// honest client completes it within two round trips, so strangers cannot starve the job's ranks.
inline constexpr int kMaxPendingHellos = 64;
/// Sets the table's limit (a number of bytes) where TCPStoreServerOptions::max_table_bytes does not.
inline constexpr char kStoreMaxBytesEnv[] = "TINYDDP_STORE_MAX_BYTES";

struct TCPStoreServerOptions {
  std::string host = "127.0.0.1";  // the job's store address (MASTER_ADDR): decides where to listen
  int port = 0;                    // 0 = a free port (see port())
  std::string secret;              // the job secret; "" = any client may connect (store_secret.h)
  uint64_t max_table_bytes = 0;    // the table's limit (store.h); 0: TINYDDP_STORE_MAX_BYTES, else 64 MiB
  // The limits above; tests shorten them.
  std::chrono::milliseconds hello_timeout = kHelloTimeout;
  std::chrono::milliseconds frame_timeout = kFrameTimeout;
  int max_connections = kMaxConnections;
};

class TCPStoreServer {
 public:
  /// Starts listening (where: see the header comment). Fails with a clear message if the port is in
  /// use or TINYDDP_STORE_MAX_BYTES is not a number; warns about a short secret.
  static absl::StatusOr<std::unique_ptr<TCPStoreServer>> Start(const TCPStoreServerOptions& options);
  /// Stops accepting, fails every waiting Get/Wait with Cancelled, closes all connections, joins threads.
  ~TCPStoreServer();

  /// The port actually bound.
  int port() const { return port_; }
  /// The address a client on this machine connects to: the one listened on, or 127.0.0.1 for all.
  const std::string& local_address() const { return local_address_; }
  /// Where it listens, for logs: "127.0.0.1", or "every interface (why)".
  const std::string& listening_on() const { return listening_on_; }
  /// Connections open now, handshake completed or not (for tests and the abuse bench).
  int open_connections();

 private:
  struct Connection {
    internal::Socket socket;
    std::thread thread;
    bool said_hello = false;  // the handshake succeeded; guarded by connections_mu_, like evicted
    bool evicted = false;
    std::atomic<bool> finished{false};
  };

  explicit TCPStoreServer(const TCPStoreServerOptions& options);
  void AcceptLoop();
  void Admit(internal::Socket socket);
  void Serve(Connection* conn);
  bool Handshake(Connection* conn);
  Bytes Handle(Bytes request, int fd);
  bool Reply(int fd, const Bytes& response);
  void ReapFinished();
  void Wake();
  void Log(const std::string& line) const;
  void LogRefusal(int fd, const absl::Status& why);

  const TCPStoreServerOptions options_;
  const std::string key_;  // derived from options_.secret (internal/store_protocol.h)
  internal::Socket listener_;
  int port_ = 0;
  std::string local_address_;
  std::string listening_on_;
  int wake_pipe_[2] = {-1, -1};  // a byte wakes AcceptLoop: to stop, or to reap a finished connection
  std::thread accept_thread_;
  internal::KvTable table_;
  std::mutex connections_mu_;
  std::list<Connection> connections_;  // oldest first; a list: Serve() holds a pointer to its element
  std::atomic<bool> stopping_{false};
  std::mutex refusals_mu_;
  std::chrono::steady_clock::time_point next_refusal_log_;  // refusals are logged at most once per 10 s
  int refusals_not_logged_ = 0;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_
