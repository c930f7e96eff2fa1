// TCPStoreServer: the rendezvous server every rank's TCPStore client talks to. It runs on background
// threads inside rank 0's process (TCPStore with is_server) or inside the launcher, which keeps it up
// for the whole job so workers can come and go. Keys live in one in-memory table (internal/kv_table.h).
//
// One thread per connection: a blocking Get or Wait simply blocks its own connection's thread on the
// table's condition variable, so it never delays other clients. Jobs have at most a few thousand ranks,
// and each rank keeps a handful of connections, so thread-per-connection stays cheap and easy to read.
#ifndef TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_
#define TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "dist/store/internal/kv_table.h"
#include "dist/store/internal/socket.h"

namespace tinyddp::dist {

class TCPStoreServer {
 public:
  /// Starts listening on `port` on every interface (0 = a free port; see port()). Fails with a clear
  /// message if the port is in use.
  static absl::StatusOr<std::unique_ptr<TCPStoreServer>> Start(int port);
  /// Stops accepting, fails every waiting Get/Wait with Cancelled, closes all connections, joins threads.
  ~TCPStoreServer();

  /// The port actually bound.
  int port() const { return port_; }

 private:
  struct Connection {
    internal::Socket socket;
    std::thread thread;
    std::atomic<bool> finished{false};
  };

  TCPStoreServer() = default;
  void AcceptLoop();
  void Serve(Connection* conn);
  Bytes Handle(const Bytes& request);
  void ReapFinished();

  internal::Socket listener_;
  int port_ = 0;
  int wake_pipe_[2] = {-1, -1};  // written by the destructor to end AcceptLoop's poll()
  std::thread accept_thread_;
  internal::KvTable table_;
  std::mutex connections_mu_;
  std::list<Connection> connections_;  // a list: Serve() holds a pointer to its element
  std::atomic<bool> stopping_{false};
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_TCP_STORE_SERVER_H_
