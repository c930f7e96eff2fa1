// TCPStore client: see tcp_store.h. Each call borrows an idle connection (or opens one and authenticates),
// sends one request frame and reads one response frame (protocol: internal/store_protocol.h).
#include "dist/store/tcp_store.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "dist/store/internal/kv_table.h"
#include "dist/store/internal/store_protocol.h"

namespace tinyddp::dist {

using internal::MessageReader;
using internal::StoreOp;
using internal::StoreRequest;

namespace {

// How much longer than the server-side wait the client waits for an answer: the server answers a
// timed-out Get itself with a precise message; this margin only catches a server that stopped responding.
constexpr std::chrono::milliseconds kReplyMargin = std::chrono::seconds(10);

std::chrono::milliseconds Left(internal::SteadyTime deadline) {
  return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                    deadline - std::chrono::steady_clock::now()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TCPStore>> TCPStore::Create(const TCPStoreOptions& options) {
  std::unique_ptr<TCPStore> store(new TCPStore());
  store->host_ = options.host;
  store->port_ = options.port;
  store->key_ = internal::DeriveStoreKey(options.secret);
  store->set_timeout(options.timeout);
  if (options.is_server) {
    auto server = TCPStoreServer::Start({.host = options.host, .port = options.port, .secret = options.secret});
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
  return OpenConnection();
}

absl::StatusOr<internal::Socket> TCPStore::OpenConnection() {
  // Rank 0 talks to its own server where it listens (loopback when it listens everywhere): MASTER_ADDR
  // may name this host as other machines see it (a NAT address, a host name).
  const std::string connect_host = server_ ? server_->local_address() : host_;
  const internal::SteadyTime deadline = internal::DeadlineAfter(timeout_);
  auto backoff = std::chrono::milliseconds(10);  // doubling to 1 s
  absl::Status full;  // the last "server is full" answer: more telling than a final attempt cut short
  while (true) {
    absl::StatusOr<internal::Socket> s = internal::Connect(connect_host, port_, deadline);
    absl::Status hello = s.ok() ? internal::ClientHandshake(s->fd(), key_, deadline) : s.status();
    if (hello.ok()) return s;
    // Ranks start in any order: a refused connection, a full server or a connection lost before the answer
    // (a flood of strangers' connections can evict ours) is tried again until the timeout. Any other answer
    // (a host name that does not resolve, a wrong secret on either side, another protocol) is final.
    if (absl::IsResourceExhausted(hello)) full = hello;
    const bool again = absl::IsResourceExhausted(hello) || absl::IsUnavailable(hello);
    if (!again || Left(deadline).count() == 0) {
      if (!s.ok()) {
        return absl::Status(hello.code(), absl::StrCat(
            "could not connect to ", connect_host, ":", port_, " within ",
            absl::FormatDuration(absl::FromChrono(timeout_)), ": ", hello.message(), "; is rank 0 (or the launcher, "
            "which hosts the store) running? check MASTER_ADDR/MASTER_PORT and that the port is reachable from here"));
      }
      if (!full.ok() && (absl::IsDeadlineExceeded(hello) || absl::IsUnavailable(hello))) hello = full;
      if (absl::IsDeadlineExceeded(hello)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "store server at ", Where(), " did not complete the handshake within ",
            absl::FormatDuration(absl::FromChrono(timeout_)),
            " (is it out of file descriptors? is another program listening on this port?)"));
      }
      return absl::Status(hello.code(), absl::StrCat("handshake with the store server at ", Where(),
                                                     " failed: ", hello.message()));
    }
    std::this_thread::sleep_for(std::min(backoff, Left(deadline)));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
  }
}

void TCPStore::ReturnConnection(internal::Socket socket) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(socket));
}

absl::StatusOr<MessageReader> TCPStore::Call(const StoreRequest& request) {
  // The limits of store.h, checked before anything is sent, with the error the server would give.
  if (request.op == StoreOp::kWait) {
    RETURN_IF_ERROR(internal::CheckWaitKeys(request.keys));
  } else if (request.op != StoreOp::kNumKeys) {
    RETURN_IF_ERROR(internal::CheckKey(request.key));
  }
  RETURN_IF_ERROR(internal::CheckValue(request.key, request.expected.size()));
  RETURN_IF_ERROR(internal::CheckValue(request.key, request.value.size()));
  ASSIGN_OR_RETURN(internal::Socket socket, TakeConnection());
  // Get and Wait may block on the server for their timeout; the reply gets that long, plus a margin.
  const std::chrono::milliseconds server_wait(
      request.op == StoreOp::kGet || request.op == StoreOp::kWait ? request.number : 0);
  const auto budget = internal::ClampTimeout(server_wait) + std::max(internal::ClampTimeout(timeout_), kReplyMargin);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  absl::Status sent = internal::SendFrame(socket.fd(), internal::EncodeRequest(request), deadline);
  absl::StatusOr<Bytes> response =
      sent.ok() ? internal::RecvFrame(socket.fd(), internal::kMaxResponseBytes, deadline) : sent;
  if (!response.ok()) {
    // The connection is dropped either way: after a lost reply it could deliver a stale answer.
    if (absl::IsDeadlineExceeded(response.status())) {
      return absl::DeadlineExceededError(absl::StrCat("store server at ", Where(), " did not answer within ",
                                                      absl::FormatDuration(absl::FromChrono(budget))));
    }
    absl::Status lost = absl::UnavailableError(
        absl::StrCat("lost the connection to the store server at ", Where(), " (", response.status().message(),
                     "): the process hosting it (rank 0 or the launcher) probably exited or crashed"));
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = lost;
    return lost;
  }
  ReturnConnection(std::move(socket));
  MessageReader reply(std::move(*response));
  RETURN_IF_ERROR(internal::ReadResponseStatus(reply));
  return reply;
}

// Each operation: one request, then the result read from the reply.
absl::Status TCPStore::Set(const std::string& key, const Bytes& value) {
  return Call({.op = StoreOp::kSet, .key = key, .value = value}).status();
}

absl::StatusOr<Bytes> TCPStore::Get(const std::string& key) {
  ASSIGN_OR_RETURN(MessageReader reply, Call({.op = StoreOp::kGet, .key = key, .number = timeout_.count()}));
  return reply.Blob();
}

absl::StatusOr<int64_t> TCPStore::Add(const std::string& key, int64_t delta) {
  ASSIGN_OR_RETURN(MessageReader reply, Call({.op = StoreOp::kAdd, .key = key, .number = delta}));
  return reply.I64();
}

absl::StatusOr<Bytes> TCPStore::CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  ASSIGN_OR_RETURN(MessageReader reply,
                   Call({.op = StoreOp::kCompareSet, .key = key, .value = desired, .expected = expected}));
  return reply.Blob();
}

absl::Status TCPStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return Call({.op = StoreOp::kWait, .keys = keys, .number = timeout.count()}).status();
}

absl::StatusOr<bool> TCPStore::Delete(const std::string& key) {
  ASSIGN_OR_RETURN(MessageReader reply, Call({.op = StoreOp::kDelete, .key = key}));
  ASSIGN_OR_RETURN(const uint8_t existed, reply.U8());
  return existed != 0;
}

absl::StatusOr<int64_t> TCPStore::NumKeys() {
  ASSIGN_OR_RETURN(MessageReader reply, Call({.op = StoreOp::kNumKeys}));
  return reply.I64();
}

}  // namespace tinyddp::dist
