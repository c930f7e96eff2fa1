// TCPStore client: see tcp_store.h. Each call borrows an idle connection (or opens one), sends one
// request frame and reads one response frame (protocol: internal/store_protocol.h).
#include "dist/store/tcp_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/kv_table.h"
#include "dist/store/internal/store_protocol.h"

namespace tinyddp::dist {

using internal::MessageReader;
using internal::MessageWriter;
using internal::StoreOp;

namespace {

// How much longer than the server-side wait the client waits for an answer: the server answers a
// timed-out Get itself with a precise message; this margin only catches a server that stopped responding.
constexpr std::chrono::milliseconds kReplyMargin = std::chrono::seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<TCPStore>> TCPStore::Create(const TCPStoreOptions& options) {
  std::unique_ptr<TCPStore> store(new TCPStore());
  store->host_ = options.host;
  store->port_ = options.port;
  store->set_timeout(options.timeout);
  if (options.is_server) {
    auto server = TCPStoreServer::Start(options.port);
    if (!server.ok()) {
      return absl::Status(server.status().code(),
                          absl::StrCat("could not start the store server (this process is rank 0, which hosts it): ",
                                       server.status().message()));
    }
    store->server_ = std::move(*server);
    store->port_ = store->server_->port();
  }
  auto first = store->TakeConnection();  // fail now, with the connect error, rather than at first use
  RETURN_IF_ERROR(first);
  store->ReturnConnection(std::move(*first));
  return store;
}

TCPStore::~TCPStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.clear();
  }
  server_.reset();
}

std::string TCPStore::Where() const { return absl::StrCat(host_, ":", port_); }

absl::StatusOr<internal::Socket> TCPStore::TakeConnection() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(broken_);
    if (!idle_.empty()) {
      internal::Socket s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
  }
  // Rank 0 talks to its own server over loopback: MASTER_ADDR may name this host as other machines
  // see it (a NAT address, a hostname), while loopback always reaches this process.
  const std::string connect_host = server_ ? "127.0.0.1" : host_;
  auto s = internal::ConnectWithRetry(connect_host, port_, timeout_);
  if (!s.ok()) {
    return absl::Status(s.status().code(),
                        absl::StrCat(s.status().message(),
                                     "; is rank 0 (or the launcher, which hosts the store) running? "
                                     "check MASTER_ADDR/MASTER_PORT and that the port is reachable from here"));
  }
  return s;
}

void TCPStore::ReturnConnection(internal::Socket socket) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(socket));
}

absl::StatusOr<Bytes> TCPStore::Call(const Bytes& request, std::chrono::milliseconds server_wait) {
  auto socket = TakeConnection();
  RETURN_IF_ERROR(socket);
  // Clamped first so that a "forever" timeout (milliseconds::max()) cannot overflow the sum.
  const auto year = std::chrono::milliseconds(std::chrono::hours(24 * 365));
  const auto budget = std::min(server_wait, year) + std::min(std::max(timeout_, kReplyMargin), year);
  const auto deadline = internal::DeadlineAfter(budget);
  absl::Status sent = internal::SendFrame(socket->fd(), request, deadline);
  absl::StatusOr<Bytes> response = sent.ok() ? internal::RecvFrame(socket->fd(), deadline) : sent;
  if (!response.ok()) {
    // The connection is dropped either way: after a lost reply it could deliver a stale answer.
    if (absl::IsDeadlineExceeded(response.status())) {
      return absl::DeadlineExceededError(absl::StrCat("store server at ", Where(), " did not answer within ",
                                                      internal::FormatDuration(budget)));
    }
    absl::Status lost = absl::UnavailableError(
        absl::StrCat("lost the connection to the store server at ", Where(), " (", response.status().message(),
                     "): the process hosting it (rank 0 or the launcher) probably exited or crashed"));
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = lost;
    return lost;
  }
  ReturnConnection(std::move(*socket));
  return response;
}

// Each operation: build the request, Call, check the response status, decode the result.
#define TINYDDP_STORE_CALL(var, request, wait)        \
  auto var##_frame = Call((request), (wait));         \
  if (!var##_frame.ok()) return var##_frame.status(); \
  MessageReader var(*var##_frame);                    \
  if (absl::Status s = internal::ReadResponseStatus(var); !s.ok()) return s

absl::Status TCPStore::Set(const std::string& key, const Bytes& value) {
  TINYDDP_STORE_CALL(reply, MessageWriter().U8(uint8_t(StoreOp::kSet)).Str(key).Blob(value).Take(),
                     std::chrono::milliseconds(0));
  return absl::OkStatus();
}

absl::StatusOr<Bytes> TCPStore::Get(const std::string& key) {
  TINYDDP_STORE_CALL(reply, MessageWriter().U8(uint8_t(StoreOp::kGet)).Str(key).I64(timeout_.count()).Take(),
                     timeout_);
  return reply.Blob();
}

absl::StatusOr<int64_t> TCPStore::Add(const std::string& key, int64_t delta) {
  TINYDDP_STORE_CALL(reply, MessageWriter().U8(uint8_t(StoreOp::kAdd)).Str(key).I64(delta).Take(),
                     std::chrono::milliseconds(0));
  return reply.I64();
}

absl::StatusOr<Bytes> TCPStore::CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  TINYDDP_STORE_CALL(
      reply, MessageWriter().U8(uint8_t(StoreOp::kCompareSet)).Str(key).Blob(expected).Blob(desired).Take(),
      std::chrono::milliseconds(0));
  return reply.Blob();
}

absl::Status TCPStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  MessageWriter w;
  w.U8(uint8_t(StoreOp::kWait)).Str(std::to_string(keys.size()));
  for (const auto& k : keys) w.Str(k);
  w.I64(timeout.count());
  TINYDDP_STORE_CALL(reply, w.Take(), timeout);
  return absl::OkStatus();
}

absl::StatusOr<bool> TCPStore::Delete(const std::string& key) {
  TINYDDP_STORE_CALL(reply, MessageWriter().U8(uint8_t(StoreOp::kDelete)).Str(key).Take(),
                     std::chrono::milliseconds(0));
  auto existed = reply.U8();
  RETURN_IF_ERROR(existed);
  return *existed != 0;
}

absl::StatusOr<int64_t> TCPStore::NumKeys() {
  TINYDDP_STORE_CALL(reply, MessageWriter().U8(uint8_t(StoreOp::kNumKeys)).Str("").Take(),
                     std::chrono::milliseconds(0));
  return reply.I64();
}

#undef TINYDDP_STORE_CALL

}  // namespace tinyddp::dist
