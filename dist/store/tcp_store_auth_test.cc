// The store's authentication over real loopback sockets: a wrong or missing secret is refused on both
// sides (the server refuses the client, the client refuses a server that cannot prove it knows the
// secret), a handshake recorded by a relay and replayed on a new connection fails in either direction,
// the secret never appears in what a client sends, and strangers' attempts are logged without flooding.
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/store/internal/socket.h"
#include "dist/store/store_secret.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_server.h"
#include "dist/testing/store_abuse.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using internal::OkResponse;
using internal::Socket;
using std::chrono_literals::operator""s;
using testing::RawStoreConnection;

absl::StatusOr<std::unique_ptr<TCPStore>> Connect(int port, const std::string& secret) {
  return TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = 10s, .secret = secret});
}

bool Contains(const absl::Status& s, const std::string& text) { return absl::StrContains(s.message(), text); }

// A listener on loopback for a fake server or a relay; the client connects to its port.
struct FakeServer {
  Socket listener;
  int port = 0;

  FakeServer() {
    auto s = internal::Listen("127.0.0.1", 0, &port);
    EXPECT_TRUE(s.ok()) << s.status();
    listener = std::move(*s);
  }
  Socket Accept() {
    pollfd p{listener.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 30000), 1) << "no client connected";
    return Socket(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  }
};

Bytes Recv(const Socket& s) {
  auto frame = internal::RecvFrame(s.fd(), internal::kMaxHelloBytes, internal::DeadlineAfter(30s));
  EXPECT_TRUE(frame.ok()) << frame.status();
  return frame.ok() ? *frame : Bytes();
}

void Send(const Socket& s, const Bytes& frame) {
  EXPECT_TRUE(internal::SendFrame(s.fd(), frame, internal::DeadlineAfter(30s)).ok());
}

Bytes RandomBytes(size_t n) {
  std::random_device rd;
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rd());
  return b;
}

TEST(TCPStoreAuth, TheServerRefusesAWrongOrMissingSecretAndLogsStrangersWithoutFlooding) {
  const std::string secret = *GenerateStoreSecret();
  auto server = testing::StoreServerProcess::Start({.secret = secret});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto wrong = Connect(port, secret.substr(1) + "0");
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(wrong.status()) && Contains(wrong.status(), kStoreSecretEnv)) << wrong.status();
  auto none = Connect(port, "");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(none.status()) && Contains(none.status(), kStoreSecretEnv)) << none.status();
  // A stranger guessing in a loop: every guess refused, each with an answer; the log gets a line, not 300.
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    auto c = RawStoreConnection::Connect(port);
    ASSERT_TRUE(c.ok());
    refused += absl::IsPermissionDenied(c->Hello("a-wrong-guess")) ? 1 : 0;
  }
  EXPECT_EQ(refused, 300);
  auto right = Connect(port, secret);
  ASSERT_TRUE(right.ok()) << right.status();
  ASSERT_TRUE((*right)->Set("after/guesses", std::string("served")).ok());
  EXPECT_EQ(*(*right)->GetString("after/guesses"), "served");
  const std::string log = (*server)->Stderr();
  EXPECT_TRUE(absl::StrContains(log, "refused a connection from 127.0.0.1 port ")) << log;
  EXPECT_TRUE(absl::StrContains(log, "wrong job secret")) << log;
  int lines = 0;
  for (size_t at = 0; (at = log.find("refused a connection", at)) != std::string::npos; ++at) ++lines;
  EXPECT_LE(lines, 2) << "302 refusals in a few seconds must be logged at most once per 10 s:\n" << log;
  EXPECT_EQ((*server)->Stop(), 0) << log;
}

TEST(TCPStoreAuth, AClientRefusesAServerThatCannotProveItKnowsTheSecret) {
  const std::string secret = *GenerateStoreSecret();
  // A server without a secret admits anyone, but a client that has one does not trust it.
  auto open = TCPStoreServer::Start({});
  ASSERT_TRUE(open.ok());
  auto to_open = Connect((*open)->port(), secret);
  ASSERT_FALSE(to_open.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(to_open.status()) && Contains(to_open.status(), "runs without a job secret"))
      << to_open.status();
  // An impostor that speaks the protocol and admits the client, but cannot compute the server's MAC.
  FakeServer impostor;
  std::thread serve([&] {
    Socket c = impostor.Accept();
    Recv(c);
    Send(c, OkResponse().Blob(RandomBytes(32)).Take());
    Recv(c);
    Send(c, OkResponse().Blob(RandomBytes(32)).Take());
  });
  auto to_impostor = Connect(impostor.port, secret);
  serve.join();
  ASSERT_FALSE(to_impostor.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(to_impostor.status()) &&
              Contains(to_impostor.status(), "does not know the job secret"))
      << to_impostor.status();
}

TEST(TCPStoreAuth, AHandshakeRecordedByARelayFailsWhenReplayedOnANewConnection) {
  const std::string secret = *GenerateStoreSecret();
  auto server = TCPStoreServer::Start({.host = "127.0.0.1", .port = 0, .secret = secret});
  ASSERT_TRUE(server.ok());
  // A relay between a real client and the real server records the four messages of a good handshake.
  FakeServer relay;
  std::vector<Bytes> recorded;
  std::thread record([&] {
    Socket client = relay.Accept();
    auto upstream = internal::Connect("127.0.0.1", (*server)->port(), internal::DeadlineAfter(10s));
    ASSERT_TRUE(upstream.ok());
    for (int i = 0; i < 4; ++i) {
      const Socket& from = i % 2 == 0 ? client : *upstream;
      recorded.push_back(Recv(from));
      Send(i % 2 == 0 ? *upstream : client, recorded.back());
    }
  });
  auto through_relay = Connect(relay.port, secret);
  record.join();
  ASSERT_TRUE(through_relay.ok()) << "the relay must be transparent: " << through_relay.status();
  ASSERT_EQ(recorded.size(), 4u);

  // Replayed to the server: the hello and the proof, on a new connection. The server's nonce is new.
  auto replay = RawStoreConnection::Connect((*server)->port());
  ASSERT_TRUE(replay.ok());
  ASSERT_TRUE(replay->SendFrame(recorded[0]).ok());
  auto challenge = internal::RecvFrame(replay->fd(), internal::kMaxResponseBytes, internal::DeadlineAfter(10s));
  ASSERT_TRUE(challenge.ok());
  EXPECT_NE(*challenge, recorded[1]) << "the server must pick a fresh nonce for every connection";
  ASSERT_TRUE(replay->SendFrame(recorded[2]).ok());
  absl::Status answer = replay->ReadResponse();
  EXPECT_TRUE(absl::IsPermissionDenied(answer)) << answer;
  EXPECT_TRUE(replay->ClosedByServerWithin(10s));

  // Replayed to a client: the server's challenge and answer, by an impostor. The client's nonce is new.
  FakeServer impostor;
  Bytes fresh_hello;
  std::thread serve([&] {
    Socket c = impostor.Accept();
    fresh_hello = Recv(c);
    Send(c, recorded[1]);
    Recv(c);
    Send(c, recorded[3]);
  });
  auto fooled = Connect(impostor.port, secret);
  serve.join();
  EXPECT_NE(fresh_hello, recorded[0]) << "the client must pick a fresh nonce for every connection";
  ASSERT_FALSE(fooled.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(fooled.status())) << fooled.status();
}

// True if any 8 consecutive bytes of `needle` appear in `haystack`.
bool SharesEightBytes(const std::string& haystack, const std::string& needle) {
  for (size_t i = 0; i + 8 <= needle.size(); ++i) {
    if (absl::StrContains(haystack, needle.substr(i, 8))) return true;
  }
  return false;
}

TEST(TCPStoreAuth, NeitherTheSecretNorTheKeyEverCrossesTheWire) {
  const std::string secret = *GenerateStoreSecret();
  // A fake server plays the protocol and keeps every byte the client sends until it hangs up.
  FakeServer fake;
  std::string sent;
  std::thread capture([&] {
    Socket c = fake.Accept();
    const Bytes hello = Recv(c);
    Send(c, OkResponse().Blob(RandomBytes(32)).Take());
    const Bytes proof = Recv(c);
    Send(c, OkResponse().Blob(RandomBytes(32)).Take());
    sent.append(hello.begin(), hello.end()).append(proof.begin(), proof.end());
    char buf[4096];
    for (ssize_t n; (n = ::recv(c.fd(), buf, sizeof(buf), 0)) > 0;) sent.append(buf, static_cast<size_t>(n));
  });
  auto client = Connect(fake.port, secret);  // refuses the fake's answer, and hangs up
  capture.join();
  EXPECT_FALSE(client.ok());
  ASSERT_GE(sent.size(), 64u) << "the client sent no handshake";
  EXPECT_FALSE(SharesEightBytes(sent, secret)) << "the secret (or 8 bytes of it) went over the wire";
  EXPECT_FALSE(SharesEightBytes(sent, internal::DeriveStoreKey(secret))) << "the derived key went over the wire";
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  tinyddp::dist::testing::RunStoreServerChildIfAsked();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
