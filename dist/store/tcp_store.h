// TCPStore: the Store every rank of a job shares over TCP. One process (rank 0, or the launcher)
// runs the TCPStoreServer on MASTER_ADDR:MASTER_PORT; every rank, rank 0 included, is a client.
//
//   auto store = TCPStore::Create({.host = "10.0.0.1", .port = 29500, .is_server = rank == 0});
//
// Clients connect with retry and exponential backoff until the timeout, so ranks may start in any
// order; on each new connection client and server first prove to each other that they know the job
// secret (store_secret.h, internal/store_protocol.h), without sending it. Blocking calls
// (Get, Wait) wait on the server, bounded by the store's timeout, and the client gives the server a
// little extra time to answer before giving up on its own. Keys, values and Wait lists over the limits
// of store.h are refused here, before anything is sent, with the same error the server would give.
#ifndef TINYDDP_DIST_STORE_TCP_STORE_H_
#define TINYDDP_DIST_STORE_TCP_STORE_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/store/internal/socket.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store.h"
#include "dist/store/tcp_store_server.h"

namespace tinyddp::dist {

struct TCPStoreOptions {
  std::string host = "127.0.0.1";  // where the server runs (MASTER_ADDR)
  int port = 29500;                // MASTER_PORT; with is_server, 0 picks a free port (see port())
  bool is_server = false;          // start the server in this process (rank 0 when no launcher hosts it);
                                   // it listens where tcp_store_server.h says for `host`
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;  // connecting, and every blocking call
  std::string secret;              // the job secret, proved (never sent) on every connection; with
                                   // is_server, the one the server requires ("" = none: anyone may connect)
};

/// Thread-safe: concurrent calls from several threads each use their own connection, so one thread's
/// blocking Get never delays another thread's Set.
class TCPStore : public Store {
 public:
  /// Starts the server if asked, then connects (retrying until options.timeout). A failed connection says
  /// where it tried, for how long, why, and what to check. A failed handshake is not retried: the
  /// server refusing this client's secret is Unauthenticated (none) or PermissionDenied (wrong); this
  /// client refusing a server that cannot prove it knows the secret is PermissionDenied.
  static absl::StatusOr<std::unique_ptr<TCPStore>> Create(const TCPStoreOptions& options);
  /// Closes connections; if this process hosts the server, stops it (other ranks' calls then fail).
  ~TCPStore() override = default;

  absl::Status Set(const std::string& key, const Bytes& value) override;
  absl::StatusOr<Bytes> Get(const std::string& key) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  absl::StatusOr<bool> Delete(const std::string& key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  using Store::Set;
  using Store::Wait;

  /// The server's port (the one picked when created with port 0 and is_server).
  int port() const { return port_; }

 private:
  TCPStore() = default;
  /// Sends one request and returns the response positioned at its result (a non-OK answer as its status).
  absl::StatusOr<internal::MessageReader> Call(const internal::StoreRequest& request);
  absl::StatusOr<internal::Socket> TakeConnection();
  absl::StatusOr<internal::Socket> OpenConnection();
  void ReturnConnection(internal::Socket socket);
  std::string Where() const;

  std::string host_;
  int port_ = 0;
  std::string key_;  // derived from the secret (internal/store_protocol.h)
  std::unique_ptr<TCPStoreServer> server_;  // declared before idle_: our connections close first
  std::mutex mu_;
  std::vector<internal::Socket> idle_;  // connections not in use by a call; one is kept open
  absl::Status broken_;                 // set once the server is known to be gone: later calls fail fast
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_TCP_STORE_H_
