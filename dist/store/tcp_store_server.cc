// TCPStoreServer: see tcp_store_server.h. The accept thread polls the listening socket and a wake
// pipe; each accepted connection gets a thread that reads a request frame, runs it against the table
// and writes the response frame, until the client hangs up.
#include "dist/store/tcp_store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/store_protocol.h"

namespace tinyddp::dist {

using internal::MessageReader;
using internal::MessageWriter;
using internal::StoreOp;

absl::StatusOr<std::unique_ptr<TCPStoreServer>> TCPStoreServer::Start(int port) {
  std::unique_ptr<TCPStoreServer> server(new TCPStoreServer());
  auto listener = internal::Listen(port, &server->port_);
  RETURN_IF_ERROR(listener);
  server->listener_ = std::move(*listener);
  if (::pipe2(server->wake_pipe_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 failed: ", internal::ErrnoText(errno)));
  }
  TCPStoreServer* raw = server.get();
  server->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return server;
}

TCPStoreServer::~TCPStoreServer() {
  stopping_ = true;
  if (wake_pipe_[1] >= 0) {
    const char byte = 1;
    (void)!::write(wake_pipe_[1], &byte, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  table_.Close();  // wakes handlers blocked in Get/Wait
  std::lock_guard<std::mutex> lock(connections_mu_);
  for (Connection& c : connections_) ::shutdown(c.socket.fd(), SHUT_RDWR);  // wakes handlers in recv
  for (Connection& c : connections_) c.thread.join();
  connections_.clear();
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void TCPStoreServer::AcceptLoop() {
  while (!stopping_) {
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0 || stopping_) return;
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the client gave up between poll and accept, or fds ran out: keep serving
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ReapFinished();
    std::lock_guard<std::mutex> lock(connections_mu_);
    Connection& conn = connections_.emplace_back();
    conn.socket = internal::Socket(fd);
    Connection* raw = &conn;
    conn.thread = std::thread([this, raw] { Serve(raw); });
  }
}

void TCPStoreServer::ReapFinished() {
  std::lock_guard<std::mutex> lock(connections_mu_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->finished) {
      it->thread.join();
      it = connections_.erase(it);  // closes the socket: only now, so its fd number cannot be reused early
    } else {
      ++it;
    }
  }
}

void TCPStoreServer::Serve(Connection* conn) {
  while (!stopping_) {
    auto request = internal::RecvFrame(conn->socket.fd(), internal::kNoDeadline);
    if (!request.ok()) break;  // the client hung up (the normal end) or the server is stopping
    Bytes response = Handle(*request);
    if (!internal::SendFrame(conn->socket.fd(), response, internal::kNoDeadline).ok()) break;
  }
  conn->finished = true;
}

Bytes TCPStoreServer::Handle(const Bytes& request) {
  MessageReader in(request);
  auto op = in.U8();
  if (!op.ok()) return internal::ErrorResponse(op.status());
  auto key = in.Str();
  // Each case reads its arguments; a malformed request becomes an error response, not a crash.
  switch (static_cast<StoreOp>(*op)) {
    case StoreOp::kSet: {
      auto value = in.Blob();
      if (!key.ok() || !value.ok()) break;
      absl::Status s = table_.Set(*key, *value);
      return s.ok() ? MessageWriter().U8(0).Take() : internal::ErrorResponse(s);
    }
    case StoreOp::kGet: {
      auto timeout_ms = in.I64();
      if (!key.ok() || !timeout_ms.ok()) break;
      const std::chrono::milliseconds timeout(*timeout_ms);
      auto value = table_.Get(*key, internal::DeadlineAfter(timeout), timeout);
      return value.ok() ? MessageWriter().U8(0).Blob(*value).Take() : internal::ErrorResponse(value.status());
    }
    case StoreOp::kAdd: {
      auto delta = in.I64();
      if (!key.ok() || !delta.ok()) break;
      auto value = table_.Add(*key, *delta);
      return value.ok() ? MessageWriter().U8(0).I64(*value).Take() : internal::ErrorResponse(value.status());
    }
    case StoreOp::kCompareSet: {
      auto expected = in.Blob();
      auto desired = in.Blob();
      if (!key.ok() || !expected.ok() || !desired.ok()) break;
      auto value = table_.CompareSet(*key, *expected, *desired);
      return value.ok() ? MessageWriter().U8(0).Blob(*value).Take() : internal::ErrorResponse(value.status());
    }
    case StoreOp::kWait: {
      // The "key" slot carries the number of keys as text, so every request starts op + string.
      int64_t n = 0;
      if (!key.ok() || !absl::SimpleAtoi(*key, &n) || n < 0) break;
      std::vector<std::string> keys;
      for (int64_t i = 0; i < n; ++i) {
        auto k = in.Str();
        if (!k.ok()) return internal::ErrorResponse(k.status());
        keys.push_back(*k);
      }
      auto timeout_ms = in.I64();
      if (!timeout_ms.ok()) break;
      const std::chrono::milliseconds timeout(*timeout_ms);
      absl::Status s = table_.Wait(keys, internal::DeadlineAfter(timeout), timeout);
      return s.ok() ? MessageWriter().U8(0).Take() : internal::ErrorResponse(s);
    }
    case StoreOp::kDelete: {
      if (!key.ok()) break;
      auto existed = table_.Delete(*key);
      return MessageWriter().U8(0).U8(*existed ? 1 : 0).Take();
    }
    case StoreOp::kNumKeys:
      return MessageWriter().U8(0).I64(table_.NumKeys()).Take();
  }
  return internal::ErrorResponse(
      absl::InvalidArgumentError(absl::StrCat("malformed store request (op ", static_cast<int>(*op), ")")));
}

}  // namespace tinyddp::dist
