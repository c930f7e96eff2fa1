// TCPStoreServer: see tcp_store_server.h. The accept thread polls the listening socket and a wake
// pipe; each accepted connection gets a thread that runs the handshake, then reads a request frame,
// runs it against the table and writes the response frame, until the client hangs up.
#include "dist/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store_secret.h"

namespace tinyddp::dist {

using internal::OkResponse;
using internal::StoreOp;
using internal::StoreRequest;

namespace {

// The numeric address to listen on for the job's store address, or "" for every interface
// (the table in tcp_store_server.h says why).
std::string ListenAddressFor(const std::string& host) {
  if (host == "localhost") return "127.0.0.1";
  if (host.empty() || host == "0.0.0.0" || host == "::") return "";
  in6_addr v6;
  in_addr v4;
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return host;
  return "";  // a host name
}

// Accepting again while out of file descriptors (or kernel memory) waits this long, doubling up to the
// maximum: the pending client stays in the listen backlog, and retrying at once would spin a core.
constexpr std::chrono::milliseconds kAcceptBackoffMin(10);
constexpr std::chrono::milliseconds kAcceptBackoffMax(1000);

bool OutOfResources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

// The response to a table call: its result after the OK, or its error.
Bytes Respond(const absl::Status& s) { return s.ok() ? OkResponse().Take() : internal::ErrorResponse(s); }
Bytes Respond(const absl::StatusOr<Bytes>& v) { return v.ok() ? OkResponse().Blob(*v).Take() : Respond(v.status()); }
Bytes Respond(const absl::StatusOr<int64_t>& v) { return v.ok() ? OkResponse().I64(*v).Take() : Respond(v.status()); }
Bytes Respond(const absl::StatusOr<bool>& v) { return v.ok() ? OkResponse().U8(*v).Take() : Respond(v.status()); }

constexpr std::chrono::seconds kRefusalLogInterval(10);

// The table's limit: the options', else TINYDDP_STORE_MAX_BYTES, else the default.
absl::StatusOr<uint64_t> TableLimit(uint64_t from_options) {
  if (from_options > 0) return from_options;
  const char* text = std::getenv(kStoreMaxBytesEnv);
  if (text == nullptr || *text == '\0') return kDefaultStoreMaxBytes;
  uint64_t bytes = 0;
  if (absl::SimpleAtoi(text, &bytes) && bytes > 0) return bytes;
  return absl::InvalidArgumentError(absl::StrCat(kStoreMaxBytesEnv, "='", text, "': expected a number of bytes, e.g. ",
                                                 kStoreMaxBytesEnv, "=$((256 << 20)) for 256 MiB"));
}

}  // namespace

TCPStoreServer::TCPStoreServer(const TCPStoreServerOptions& options)
    : options_(options), key_(internal::DeriveStoreKey(options.secret)), table_(options.max_table_bytes) {}

absl::StatusOr<std::unique_ptr<TCPStoreServer>> TCPStoreServer::Start(const TCPStoreServerOptions& given) {
  TCPStoreServerOptions options = given;
  ASSIGN_OR_RETURN(options.max_table_bytes, TableLimit(given.max_table_bytes));
  std::unique_ptr<TCPStoreServer> server(new TCPStoreServer(options));
  std::string ip = ListenAddressFor(options.host);
  auto listener = internal::Listen(ip, options.port, &server->port_);
  const bool asked_for_all = options.host.empty() || options.host == "0.0.0.0" || options.host == "::";
  server->listening_on_ = !ip.empty()     ? ip
                          : asked_for_all ? "every interface"
                                          : absl::StrCat("every interface (", options.host, " is a host name)");
  if (!listener.ok() && absl::IsNotFound(listener.status())) {
    listener = internal::Listen("", options.port, &server->port_);
    server->listening_on_ = absl::StrCat("every interface (", ip, " is not an address of this machine: NAT?)");
    ip.clear();
  }
  RETURN_IF_ERROR(listener);
  server->listener_ = std::move(*listener);
  server->local_address_ = ip.empty() ? "127.0.0.1" : ip;
  if (::pipe2(server->wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 failed: ", internal::ErrnoText(errno)));
  }
  if (!options.secret.empty() && options.secret.size() < kShortStoreSecretBytes) {
    server->Log(absl::StrCat("warning: the job secret is only ", options.secret.size(), " bytes; one guessable from a "
                             "captured handshake protects little. Use e.g. `openssl rand -hex 32`"));
  }
  TCPStoreServer* raw = server.get();
  server->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return server;
}

TCPStoreServer::~TCPStoreServer() {
  stopping_ = true;
  Wake();
  if (accept_thread_.joinable()) accept_thread_.join();
  table_.Close();  // wakes handlers blocked in Get/Wait
  std::list<Connection> all;
  {
    // Joined outside the lock: a finishing handler takes it once more. Splicing keeps the nodes
    // (and the handlers' pointers to them) where they are.
    std::lock_guard<std::mutex> lock(connections_mu_);
    all.splice(all.end(), connections_);
  }
  for (Connection& c : all) ::shutdown(c.socket.fd(), SHUT_RDWR);  // wakes handlers in recv
  for (Connection& c : all) c.thread.join();
  // Refusals since the last line would otherwise be lost when the job ends within 10 s of it.
  if (refusals_not_logged_ > 0) {
    Log(absl::StrCat("refused ", refusals_not_logged_, " more connection(s) after the one logged above"));
  }
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

int TCPStoreServer::open_connections() {
  std::lock_guard<std::mutex> lock(connections_mu_);
  return static_cast<int>(std::count_if(connections_.begin(), connections_.end(),
                                        [](const Connection& c) { return !c.finished; }));
}

void TCPStoreServer::Log(const std::string& line) const {
  std::fprintf(stderr, "store server (port %d): %s\n", port_, line.c_str());
}

void TCPStoreServer::LogRefusal(int fd, const absl::Status& why) {
  std::lock_guard<std::mutex> lock(refusals_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_refusal_log_) {
    ++refusals_not_logged_;
    return;
  }
  Log(absl::StrCat("refused a connection from ", internal::PeerAddress(fd), ": ", why.message(),
                   refusals_not_logged_ > 0 ? absl::StrCat(" (and ", refusals_not_logged_, " more before it)") : ""));
  refusals_not_logged_ = 0;
  next_refusal_log_ = now + kRefusalLogInterval;
}

void TCPStoreServer::Wake() {
  const char byte = 1;
  if (wake_pipe_[1] >= 0) (void)!::write(wake_pipe_[1], &byte, 1);  // a full pipe is awake already
}

void TCPStoreServer::AcceptLoop() {
  std::chrono::milliseconds backoff(0);  // non-zero while the process is out of file descriptors
  while (!stopping_) {
    // While backing off, the listener is left out of poll(): it stays readable and would wake us at once.
    pollfd fds[2] = {{listener_.fd(), static_cast<short>(backoff.count() > 0 ? 0 : POLLIN), 0},
                     {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, backoff.count() > 0 ? static_cast<int>(backoff.count()) : -1) < 0 && errno != EINTR) {
      Log(absl::StrCat("poll failed: ", internal::ErrnoText(errno), "; retrying"));
      ::poll(nullptr, 0, static_cast<int>(kAcceptBackoffMax.count()));
      continue;
    }
    if (stopping_) return;
    if (fds[1].revents != 0) {
      char drain[64];
      while (::read(wake_pipe_[0], drain, sizeof(drain)) > 0) {
      }
      ReapFinished();  // a handler finished: close its socket now, freeing its descriptor
    }
    if (backoff.count() == 0 && (fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      if (backoff.count() > 0) Log("accepting connections again");
      backoff = std::chrono::milliseconds(0);
      Admit(internal::Socket(fd));
      continue;
    }
    const int err = errno;
    if (OutOfResources(err)) {
      if (backoff.count() == 0) {
        Log(absl::StrCat("cannot accept a connection (", internal::ErrnoText(err), ") with ", open_connections(),
                         " open; new clients wait until some close. Raise the limit (`ulimit -n`) if the job "
                         "needs more"));
      }
      ReapFinished();
      backoff = std::clamp(backoff * 2, kAcceptBackoffMin, kAcceptBackoffMax);
    } else if (err == EAGAIN || err == EWOULDBLOCK) {
      backoff = std::chrono::milliseconds(0);  // nobody waiting after all
    }
    // Anything else (the client gave up between poll and accept): keep serving.
  }
}

void TCPStoreServer::Admit(internal::Socket socket) {
  int one = 1;
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ReapFinished();
  std::lock_guard<std::mutex> lock(connections_mu_);
  if (static_cast<int>(connections_.size()) >= options_.max_connections) {
    Reply(socket.fd(), internal::ErrorResponse(absl::ResourceExhaustedError(absl::StrCat(
                           "the store server already has ", connections_.size(), " connections open, its limit "
                           "(kMaxConnections); is a client opening connections in a loop?"))));
    return;
  }
  // Too many connections still owe their handshake: the oldest of them makes room for this one.
  std::vector<Connection*> pending;
  for (Connection& c : connections_) {
    if (!c.said_hello && !c.evicted && !c.finished) pending.push_back(&c);
  }
  if (static_cast<int>(pending.size()) >= kMaxPendingHellos) {
    pending.front()->evicted = true;
    ::shutdown(pending.front()->socket.fd(), SHUT_RDWR);  // its handler wakes from recv and finishes
  }
  Connection& conn = connections_.emplace_back();
  conn.socket = std::move(socket);
  Connection* raw = &conn;
  try {
    conn.thread = std::thread([this, raw] { Serve(raw); });
  } catch (const std::system_error& e) {  // out of threads or memory: refuse this client, keep serving
    Reply(conn.socket.fd(), internal::ErrorResponse(absl::ResourceExhaustedError(
                                absl::StrCat("the store server could not start a thread: ", e.what()))));
    connections_.pop_back();
  }
}

void TCPStoreServer::ReapFinished() {
  std::lock_guard<std::mutex> lock(connections_mu_);
  // Erasing closes the socket: only now, after the join, so its fd number cannot be reused early.
  connections_.remove_if([](Connection& c) {
    const bool finished = c.finished;  // read once: it may turn true meanwhile
    if (finished) c.thread.join();
    return finished;
  });
}

bool TCPStoreServer::Reply(int fd, const Bytes& response) {
  return internal::SendFrame(fd, response, internal::DeadlineAfter(options_.frame_timeout)).ok();
}

void TCPStoreServer::Serve(Connection* conn) {
  const int fd = conn->socket.fd();
  if (Handshake(conn)) {
    while (!stopping_) {
      // No deadline between requests (clients keep idle connections for the whole job), one within.
      auto request = internal::RecvFrame(fd, internal::kMaxRequestBytes, internal::kNoDeadline, options_.frame_timeout);
      if (!request.ok()) {
        if (absl::IsResourceExhausted(request.status())) {
          Reply(fd, internal::ErrorResponse(absl::InvalidArgumentError(absl::StrCat(
                        "store request refused: ", request.status().message(),
                        " (kMaxRequestBytes; values are limited to ", internal::FormatBytes(kMaxStoreValueBytes),
                        "); the connection is closed"))));
        }
        break;  // the client hung up (the normal end), was too slow, sent too much, or the server is stopping
      }
      if (!Reply(fd, Handle(std::move(*request), fd))) break;
    }
  }
  conn->finished = true;
  Wake();
}

bool TCPStoreServer::Handshake(Connection* conn) {
  const int fd = conn->socket.fd();
  auto answer = internal::ServerHandshake(fd, key_, internal::DeadlineAfter(options_.hello_timeout));
  if (!answer.ok()) {
    if (!absl::IsUnavailable(answer.status()) && !absl::IsDeadlineExceeded(answer.status())) {
      Reply(fd, internal::ErrorResponse(answer.status()));  // the peer said something: tell it why not
      LogRefusal(fd, answer.status());
    }
    return false;  // silent, too slow, evicted, or refused
  }
  {
    std::lock_guard<std::mutex> lock(connections_mu_);
    if (conn->evicted) return false;
    conn->said_hello = true;
  }
  return Reply(fd, *answer);
}

Bytes TCPStoreServer::Handle(Bytes body, int fd) {
  auto parsed = internal::ParseRequest(std::move(body));
  if (!parsed.ok()) return internal::ErrorResponse(parsed.status());
  StoreRequest& r = *parsed;
  // A blocked Get/Wait ends as soon as its client hangs up, instead of holding this thread to its deadline.
  auto hung_up = [fd] { return internal::PeerClosed(fd); };
  const std::chrono::milliseconds timeout(r.number);
  switch (r.op) {
    case StoreOp::kHello:
    case StoreOp::kProof:
      return internal::ErrorResponse(absl::InvalidArgumentError("store: a handshake message after the handshake"));
    case StoreOp::kSet:
      return Respond(table_.Set(r.key, std::move(r.value)));  // moved: a 16 MiB value is not copied again
    case StoreOp::kGet:
      return Respond(table_.Get(r.key, timeout, hung_up));
    case StoreOp::kAdd:
      return Respond(table_.Add(r.key, r.number));
    case StoreOp::kCompareSet:
      return Respond(table_.CompareSet(r.key, r.expected, r.value));
    case StoreOp::kWait:
      return Respond(table_.Wait(r.keys, timeout, hung_up));
    case StoreOp::kDelete:
      return Respond(table_.Delete(r.key));
    case StoreOp::kNumKeys:
      return Respond(absl::StatusOr<int64_t>(table_.NumKeys()));
  }
  return internal::ErrorResponse(absl::InternalError("store: request op not handled"));  // ParseRequest checked it
}

}  // namespace tinyddp::dist
