// TCPStoreServer: the rendezvous server every rank's TCPStore client talks to. It runs on one background
// thread inside rank 0's process (TCPStore with is_server) or inside the launcher, which keeps it up for
// the whole job so workers can come and go. Keys live in one in-memory table (internal/kv_table.h).
//
// One thread, one event loop (epoll), as PyTorch's TCPStore with its libuv backend: non-blocking sockets,
// a read and a write buffer per connection, and a Get or Wait whose key is missing parked under that key
// until the Set or Add that brings it (or its deadline). A connection costs a few hundred bytes, not a
// thread: 100,000 ranks meet in one process (docs/performance.md).
//
// Nothing a client sends may take the launcher down or lock the job's ranks out: a connection first
// proves it knows the job secret (the handshake, internal/store_protocol.h), and all it may do is bounded:
// frame lengths, a frame's arrival and an answer's departure (kFrameTimeout), the handshake
// (kHelloTimeout), one answer queued at a time, and store.h's limits. A refused client is told why and
// logged (at most once per 10 s, with a count of the others; the last count as the server stops).
// Connections are limited only by file descriptors (RLIMIT_NOFILE, raised to its hard limit at Start); out
// of them, the oldest connection still owing its handshake makes room, or else the new client is told the
// limit and how to raise it. The loop never spins on accept.
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
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/store/internal/kv_table.h"
#include "dist/store/internal/socket.h"
#include "dist/store/internal/store_protocol.h"

namespace tinyddp::dist {

/// An honest client completes the handshake right after connecting; one that takes this long is not one.
/// Until then nothing over kMaxHelloBytes is read from it.
inline constexpr std::chrono::milliseconds kHelloTimeout = std::chrono::seconds(10);
/// A request begun must arrive, and an answer be taken, within this (33 MiB, kMaxRequestBytes, at 0.6
/// MB/s): a client that trickles bytes (slowloris) or never reads is disconnected.
inline constexpr std::chrono::milliseconds kFrameTimeout = std::chrono::seconds(60);
/// Connections owing the handshake; past it a new one evicts the oldest (an honest client completes it
/// within two round trips). Large enough for a burst of 100,000 ranks connecting at once.
inline constexpr int kMaxPendingHellos = 4096;
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
  int max_pending_hellos = kMaxPendingHellos;
};

class TCPStoreServer {
 public:
  /// Raises RLIMIT_NOFILE to its hard limit (saying so), then starts listening (where: see the header
  /// comment) and the loop's thread. Fails with a clear message if the port is in use or
  /// TINYDDP_STORE_MAX_BYTES is not a number; warns about a short secret.
  static absl::StatusOr<std::unique_ptr<TCPStoreServer>> Start(const TCPStoreServerOptions& options);
  /// Stops the loop and closes every connection (a waiting Get/Wait ends: its client loses the server).
  ~TCPStoreServer();

  /// The port actually bound.
  int port() const { return port_; }
  /// The address a client on this machine connects to: the one listened on, or 127.0.0.1 for all.
  const std::string& local_address() const { return local_address_; }
  /// Where it listens, for logs: "127.0.0.1", or "every interface (why)".
  const std::string& listening_on() const { return listening_on_; }
  /// Connections open now, handshake completed or not (for tests and benches).
  int open_connections() const { return open_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Stage { kHello, kProof, kServing };
  struct Connection {
    internal::Socket socket;
    uint64_t serial = 0;     // tells this connection from a later one given the same descriptor
    Stage stage = Stage::kHello;
    Bytes nonces;            // the handshake's two nonces, until it completes
    Bytes in, out;           // bytes read and not yet a whole frame; the answer not yet sent
    bool close_when_sent = false;
    uint32_t events = 0;     // what epoll watches for it now
    Clock::time_point deadline = Clock::time_point::max();  // hello, frame, answer or wait (Expire)
    std::unique_ptr<internal::StoreRequest> waiting;  // a parked Get/Wait (its keys: Resume),
    std::string waiting_on;                           // the key it is parked under,
    size_t checked = 0;                               // and how many of its keys are there
  };

  explicit TCPStoreServer(const TCPStoreServerOptions& options);
  void Loop();
  void Accept();
  void Admit(int fd);
  void AcceptAtTheLimit();
  bool MakeRoom();
  void OnEvent(int fd, uint32_t events);
  void ReadFrom(Connection& c);
  void HandleHandshake(Connection& c, Bytes frame);
  void Handle(Connection& c, Bytes frame);
  void Resume(Connection& c);
  void Answered(Connection& c, const Bytes& answer);
  void Unpark(Connection& c);
  void WakeWaiters(const std::string& key);
  void Send(Connection& c, const Bytes& body);
  void Flush(Connection& c);
  void Watch(Connection& c);
  void Expire();
  void Close(int fd);
  void Log(const std::string& line) const;
  void LogRefusal(int fd, const absl::Status& why);

  const TCPStoreServerOptions options_;
  const std::string key_;  // derived from options_.secret once (internal/store_protocol.h)
  internal::Socket listener_, epoll_, stop_event_, reserve_fd_;  // reserve_fd_: see AcceptAtTheLimit
  int port_ = 0;
  std::string local_address_;
  std::string listening_on_;
  std::thread thread_;
  std::atomic<int> open_{0};
  // Everything below belongs to the loop's thread.
  internal::KvTable table_;
  std::unordered_map<int, Connection> connections_;  // by descriptor
  uint64_t next_serial_ = 0;
  int pending_count_ = 0;  // connections owing the handshake
  std::unordered_map<std::string, std::unordered_set<int>> waiters_;  // missing key -> who waits for it
  std::vector<std::pair<int, uint64_t>> resumed_;  // answered Get/Waits whose connections are read again
  Clock::time_point next_sweep_{};  // Expire's next look at the deadlines; max() while none is armed
  Clock::time_point accept_paused_until_{};  // out of descriptors with nothing to free: accept later
  bool out_of_descriptors_ = false;          // said so in the log; "accepting connections again" once over
  Clock::time_point next_refusal_log_{};
  int refusals_not_logged_ = 0;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_
