// TCPStoreServer under abuse, over real sockets. Each test plays one kind of hostile or broken client
// (raw connections that speak the protocol by hand, testing/store_abuse.h) and then checks that an honest
// client is still served. Memory is read from a server in a process of its own. No assertion depends on
// timing: the deadlines here only keep a broken server from hanging the test.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store_secret.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_server.h"
#include "dist/testing/store_abuse.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using internal::StoreOp;
using internal::StoreRequest;
using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;
using testing::RawStoreConnection;

constexpr char kSecret[] = "8c1f0e54b1f7a6d2-test-job-secret";

std::unique_ptr<TCPStoreServer> StartServer(TCPStoreServerOptions options = {}) {
  options.secret = kSecret;
  auto server = TCPStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

absl::StatusOr<std::unique_ptr<TCPStore>> Connect(int port, const std::string& secret = kSecret,
                                                  std::chrono::milliseconds timeout = 30s) {
  return TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = timeout, .secret = secret});
}

// An honest client with the secret connects, sets a random value and reads it back.
void ExpectHonestClientIsServed(int port) {
  auto store = Connect(port);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string key = absl::StrCat("honest/", std::random_device()());
  const std::string value = absl::StrCat("value-", std::random_device()());
  ASSERT_TRUE((*store)->Set(key, value).ok());
  auto got = (*store)->GetString(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
}

RawStoreConnection SaidHello(int port) {
  auto c = RawStoreConnection::Connect(port);
  EXPECT_TRUE(c.ok()) << c.status();
  absl::Status hello = c->Hello(kSecret);
  EXPECT_TRUE(hello.ok()) << hello;
  return std::move(*c);
}

Bytes LengthHeader(uint32_t len) {
  return Bytes{static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len >> 16),
               static_cast<uint8_t>(len >> 24)};
}

bool Contains(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(TCPStoreAbuse, FramesDeclaringOneGiBAreRefusedWithAMessageAndTheServerKeepsServing) {
  auto server = StartServer();
  // The incident: three connections each declaring 1 GiB took down a launcher capped at 3 GiB.
  std::vector<RawStoreConnection> abusers;
  for (int i = 0; i < 3; ++i) {
    abusers.push_back(SaidHello(server->port()));
    const Bytes header = LengthHeader(1u << 30);
    ASSERT_TRUE(abusers.back().SendBytes(header.data(), header.size()).ok());
  }
  for (auto& c : abusers) {
    absl::Status answer = c.ReadResponse();
    EXPECT_TRUE(absl::IsInvalidArgument(answer)) << answer;
    EXPECT_TRUE(Contains(answer, "1024 MiB") && Contains(answer, "kMaxRequestBytes")) << answer;
    EXPECT_TRUE(c.ClosedByServerWithin(30s)) << "a connection that declared 1 GiB must be closed";
  }
  // Before the hello, the limit is 1 KiB: an HTTP probe's "GET " reads as a 542 MB length.
  auto probe = RawStoreConnection::Connect(server->port());
  ASSERT_TRUE(probe.ok());
  ASSERT_TRUE(probe->SendBytes("GET / HTTP/1.1\r\n\r\n", 18).ok());
  absl::Status answer = probe->ReadResponse();
  EXPECT_TRUE(absl::IsUnauthenticated(answer)) << answer;
  EXPECT_TRUE(probe->ClosedByServerWithin(30s));
  ExpectHonestClientIsServed(server->port());
}

TEST(TCPStoreAbuse, FramesDeclaredButNotSentCostTheServerNoMemory) {
  auto server = testing::StoreServerProcess::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  ExpectHonestClientIsServed((*server)->port());  // warm up: the first client's allocations are not abuse
  ASSERT_TRUE((*server)->WaitUntilQuiet(30s));
  const int64_t before = (*server)->RssKiB();
  // Four frames just under the request limit (33 MiB each), of which 1000 bytes arrive. A server that
  // allocated the declared length would grow by 132 MiB; one that grows with the bytes, by almost nothing.
  std::vector<RawStoreConnection> abusers;
  const Bytes partial(1000, 0x5a);
  for (int i = 0; i < 4; ++i) {
    abusers.push_back(SaidHello((*server)->port()));
    const Bytes header = LengthHeader(internal::kMaxRequestBytes);
    ASSERT_TRUE(abusers.back().SendBytes(header.data(), header.size()).ok());
    ASSERT_TRUE(abusers.back().SendBytes(partial.data(), partial.size()).ok());
  }
  // Every handler thread now sleeps waiting for bytes that will not come: it has done all it will.
  ASSERT_TRUE((*server)->WaitUntilQuiet(30s));
  const int64_t grew_kib = (*server)->RssKiB() - before;
  EXPECT_LT(grew_kib, 16 << 10) << "resident memory grew by " << grew_kib << " KiB for 4 KB of received bytes";
  ExpectHonestClientIsServed((*server)->port());
  abusers.clear();
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Stderr();
}

TEST(TCPStoreAbuse, OversizedKeysValuesAndWaitListsFromARawClientAreRefusedAndTheConnectionLives) {
  auto server = StartServer();
  RawStoreConnection c = SaidHello(server->port());
  // The TCPStore client refuses these before sending (the conformance suite checks it); a raw client
  // gets the same answer from the server.
  absl::Status s = c.Call(StoreRequest{.op = StoreOp::kSet, .key = std::string(5000, 'k'), .value = {1}});
  EXPECT_TRUE(absl::IsInvalidArgument(s) && Contains(s, "kMaxStoreKeyBytes")) << s;
  s = c.Call(StoreRequest{.op = StoreOp::kSet, .key = "big", .value = Bytes(kMaxStoreValueBytes + 1, 3)});
  EXPECT_TRUE(absl::IsInvalidArgument(s) && Contains(s, "kMaxStoreValueBytes")) << s;
  // A Wait claiming 4M keys, backed by none: refused on the count, before anything is allocated for it.
  Bytes wait = {static_cast<uint8_t>(StoreOp::kWait)};
  const Bytes count = LengthHeader(4u << 20);
  wait.insert(wait.end(), count.begin(), count.end());
  ASSERT_TRUE(c.SendFrame(wait).ok());
  s = c.ReadResponse();
  EXPECT_TRUE(absl::IsInvalidArgument(s) && Contains(s, "kMaxStoreWaitKeys")) << s;
  // Garbage after a valid request, and an unknown op.
  Bytes trailing = internal::EncodeRequest(StoreRequest{.op = StoreOp::kNumKeys});
  trailing.push_back(0);
  ASSERT_TRUE(c.SendFrame(trailing).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.ReadResponse()));
  ASSERT_TRUE(c.SendFrame(Bytes{200}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.ReadResponse()));
  // The same connection still works, and nothing refused was stored.
  EXPECT_TRUE(c.Call(StoreRequest{.op = StoreOp::kSet, .key = "small", .value = {1, 2, 3}}).ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(c.Call(StoreRequest{.op = StoreOp::kGet, .key = "big", .number = 0})));
  ExpectHonestClientIsServed(server->port());
}

TEST(TCPStoreAbuse, AClientTricklingAFrameIsDisconnectedAtTheFrameDeadline) {
  TCPStoreServerOptions options;
  options.frame_timeout = 300ms;
  auto server = StartServer(options);
  RawStoreConnection slow = SaidHello(server->port());
  // Slowloris: a frame of 1000 bytes, one byte every 50 ms. The whole frame is due 300 ms after it began.
  const Bytes header = LengthHeader(1000);
  ASSERT_TRUE(slow.SendBytes(header.data(), header.size()).ok());
  bool closed = false;
  for (int i = 0; i < 600 && !closed; ++i) {  // 30 s at most
    const uint8_t byte = 0x42;
    closed = !slow.SendBytes(&byte, 1).ok() || slow.ClosedByServerWithin(50ms);
  }
  EXPECT_TRUE(closed) << "a frame trickled one byte at a time must be cut off";
  ExpectHonestClientIsServed(server->port());
}

TEST(TCPStoreAbuse, AConnectionThatNeverSaysHelloIsClosedAtTheHelloDeadline) {
  TCPStoreServerOptions options;
  options.hello_timeout = 300ms;
  auto server = StartServer(options);
  auto silent = RawStoreConnection::Connect(server->port());
  auto half = RawStoreConnection::Connect(server->port());
  ASSERT_TRUE(silent.ok() && half.ok());
  ASSERT_TRUE(half->SendBytes("\x10\x00", 2).ok());  // half a length, then nothing
  EXPECT_TRUE(silent->ClosedByServerWithin(30s));
  EXPECT_TRUE(half->ClosedByServerWithin(30s));
  ExpectHonestClientIsServed(server->port());
}

TEST(TCPStoreAbuse, StrangersHoldingConnectionsOpenCannotLockTheJobOut) {
  TCPStoreServerOptions options;
  options.max_pending_hellos = 64;
  auto server = StartServer(options);
  constexpr int kStrangers = 300;
  std::vector<RawStoreConnection> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    auto c = RawStoreConnection::Connect(server->port());
    ASSERT_TRUE(c.ok()) << c.status();
    strangers.push_back(std::move(*c));
  }
  // The honest client's connection is accepted after all of them, and gets in.
  ExpectHonestClientIsServed(server->port());
  int closed = 0;
  for (auto& c : strangers) closed += c.ClosedByServerWithin(0ms) ? 1 : 0;
  EXPECT_GE(closed, kStrangers - 64) << "only max_pending_hellos silent connections may be kept";
  EXPECT_TRUE(strangers.front().ClosedByServerWithin(0ms)) << "the oldest stranger goes first";
}

TEST(TCPStoreAbuse, WithoutTheSecretNothingIsReadOrWritten) {
  auto server = StartServer();
  auto none = Connect(server->port(), "");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(none.status())) << none.status();
  EXPECT_TRUE(Contains(none.status(), kStoreSecretEnv)) << none.status();
  auto wrong = Connect(server->port(), "8c1f0e54b1f7a6d2-test-job-secreT");
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(wrong.status())) << wrong.status();
  EXPECT_TRUE(Contains(wrong.status(), kStoreSecretEnv)) << wrong.status();
  // A raw client that skips the hello and writes at once is refused and cut off.
  auto raw = RawStoreConnection::Connect(server->port());
  ASSERT_TRUE(raw.ok());
  absl::Status s = raw->Call(StoreRequest{.op = StoreOp::kSet, .key = "stolen", .value = {1}});
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_TRUE(raw->ClosedByServerWithin(30s));
  // Another protocol version is told so.
  auto old = RawStoreConnection::Connect(server->port());
  ASSERT_TRUE(old.ok());
  s = old->Call(StoreRequest{.op = StoreOp::kHello, .key = "tinyddp-store/1", .value = {'x'}});
  EXPECT_TRUE(absl::IsFailedPrecondition(s) && Contains(s, "tinyddp-store/1")) << s;
  // The right secret is served, and sees nothing the others tried to write.
  auto right = Connect(server->port());
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_EQ(*(*right)->NumKeys(), 0);
  ExpectHonestClientIsServed(server->port());
}

TEST(TCPStoreAbuse, AWriteThatWouldOutgrowTheTableIsRefusedNamingTheLimitAndTheServerCarriesOn) {
  TCPStoreServerOptions options;
  options.max_table_bytes = 1 << 20;
  auto server = StartServer(options);
  auto store = Connect(server->port());
  ASSERT_TRUE(store.ok());
  const std::string value(100 << 10, 'v');  // 100 KiB: ten fit in 1 MiB, the eleventh does not
  absl::Status s;
  int stored = 0;
  for (; stored < 20 && (s = (*store)->Set(absl::StrCat("fill/", stored), value)).ok(); ++stored) {
  }
  EXPECT_EQ(stored, 10);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(Contains(s, "fill/10") && Contains(s, "over its limit of 1 MiB") &&
              Contains(s, "TINYDDP_STORE_MAX_BYTES"))
      << s;
  // Nothing refused was stored; a deletion makes room again; the table's owner keeps serving.
  EXPECT_EQ(*(*store)->NumKeys(), 10);
  ASSERT_TRUE(*(*store)->Delete("fill/0"));
  EXPECT_TRUE((*store)->Set("fill/10", value).ok());
  EXPECT_TRUE(absl::IsResourceExhausted((*store)->Set("fill/11", value)));
  ASSERT_TRUE(*(*store)->Delete("fill/1"));
  ExpectHonestClientIsServed(server->port());
  // Many tiny keys cannot get around it: each counts kStoreEntryOverheadBytes for its bookkeeping.
  options.max_table_bytes = 64 << 10;
  auto small = StartServer(options);
  auto counter = Connect(small->port());
  ASSERT_TRUE(counter.ok());
  int keys = 0;
  while (keys < 100000 && (*counter)->Add(absl::StrCat(keys), 1).ok()) ++keys;
  EXPECT_LE(keys, (64 << 10) / kStoreEntryOverheadBytes);
}

TEST(TCPStoreAbuse, ByDefaultTheTableStopsBelow64MiBSoAClientCannotExhaustTheHostsMemory) {
  auto server = testing::StoreServerProcess::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = Connect((*server)->port());
  ASSERT_TRUE(store.ok());
  const Bytes value(kMaxStoreValueBytes, 0x6b);  // values at their own limit, 16 MiB: three fit
  int stored = 0;
  for (int i = 0; i < 8; ++i) stored += (*store)->Set(absl::StrCat("big/", i), value).ok() ? 1 : 0;
  EXPECT_EQ(stored, 3);
  ASSERT_TRUE((*server)->WaitUntilQuiet(30s));
  EXPECT_LT((*server)->RssKiB(), 100 << 10) << "KiB resident after eight 16 MiB writes";
  ExpectHonestClientIsServed((*server)->port());
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Stderr();
}

TEST(TCPStoreAbuse, TheTablesLimitCanBeSetFromTheEnvironment) {
  ASSERT_EQ(::setenv(kStoreMaxBytesEnv, "1048576", 1), 0);
  auto server = TCPStoreServer::Start({.host = "127.0.0.1", .secret = kSecret});
  ::setenv(kStoreMaxBytesEnv, "lots", 1);
  auto refused = TCPStoreServer::Start({.host = "127.0.0.1"});
  ::unsetenv(kStoreMaxBytesEnv);
  ASSERT_TRUE(server.ok());
  auto store = Connect((*server)->port());
  ASSERT_TRUE(store.ok());
  absl::Status s = (*store)->Set("two-mib", std::string(2 << 20, 'x'));
  EXPECT_TRUE(absl::IsResourceExhausted(s) && Contains(s, "1 MiB")) << s;
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()) && Contains(refused.status(), "TINYDDP_STORE_MAX_BYTES='lots'"))
      << refused.status();
}

TEST(TCPStoreAbuse, AWaitWhoseClientHangsUpEndsAndFreesItsConnection) {
  auto server = StartServer();
  {
    RawStoreConnection waiter = SaidHello(server->port());
    ASSERT_TRUE(waiter.SendFrame(internal::EncodeRequest(StoreRequest{
        .op = StoreOp::kWait, .keys = {"never/a", "never/b"}, .number = 3600 * 1000})).ok());
    EXPECT_EQ(server->open_connections(), 1);
  }  // the client hangs up with an hour left on its Wait
  for (int i = 0; i < 600 && server->open_connections() > 0; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(server->open_connections(), 0) << "the Wait of a client that hung up still holds its connection";
  ExpectHonestClientIsServed(server->port());
}

TEST(TCPStoreAbuse, AWaitOnTheMaximumNumberOfKeysEndsWhenPipelinedSetsBringTheLast) {
  auto server = StartServer();
  auto waiter = Connect(server->port());
  ASSERT_TRUE(waiter.ok());
  std::vector<std::string> keys;
  for (size_t i = 0; i < kMaxStoreWaitKeys; ++i) keys.push_back(absl::StrCat("rank/", i, "/addr"));
  absl::Status waited = absl::UnknownError("not returned");
  std::thread t([&] { waited = (*waiter)->Wait(keys, std::chrono::seconds(120)); });
  // Every key but the last, as fast as one connection can push them: 65535 Sets pipelined, answers read
  // by a second thread. Each Set counts off one registration; none rescans the Wait's 65536 keys.
  RawStoreConnection writer = SaidHello(server->port());
  int failed = 0;
  std::thread reader([&] {
    for (size_t i = 0; i + 1 < keys.size(); ++i) failed += writer.ReadResponse(120s).ok() ? 0 : 1;
  });
  Bytes batch;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    const Bytes frame =
        internal::EncodeRequest(StoreRequest{.op = StoreOp::kSet, .key = keys[i], .value = {uint8_t(i)}});
    const Bytes header = LengthHeader(static_cast<uint32_t>(frame.size()));
    batch.insert(batch.end(), header.begin(), header.end());
    batch.insert(batch.end(), frame.begin(), frame.end());
  }
  ASSERT_TRUE(writer.SendBytes(batch.data(), batch.size()).ok());
  reader.join();
  EXPECT_EQ(failed, 0);
  auto last = Connect(server->port());
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE((*last)->Set(keys.back(), std::string("last")).ok());
  t.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST(TCPStoreAbuse, KeepsServingAfterRunningOutOfFileDescriptors) {
  // The server's process may open 8 descriptors beyond what it needs to start; 24 clients connect.
  auto server = testing::StoreServerProcess::Start({.secret = kSecret, .spare_fds = 8});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<RawStoreConnection> clients;
  for (int i = 0; i < 24; ++i) {
    auto c = RawStoreConnection::Connect((*server)->port());  // the kernel completes it, accepted or not
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(c->SendHelloOnly().ok());
    clients.push_back(std::move(*c));
  }
  bool ran_out = false;
  for (int i = 0; i < 600 && !ran_out; ++i) {  // 30 s at most
    ran_out = (*server)->Stderr().find("cannot accept a connection") != std::string::npos;
    if (!ran_out) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(ran_out) << "the server never ran out of descriptors; stderr: " << (*server)->Stderr();
  const double cpu_before = (*server)->CpuSeconds();
  std::this_thread::sleep_for(1s);  // out of descriptors for a second: a spinning accept loop burns it all
  std::printf("store server CPU while out of descriptors: %.3f s in 1 s (printed, not asserted)\n",
              (*server)->CpuSeconds() - cpu_before);
  clients.resize(4);  // 20 leave
  ExpectHonestClientIsServed((*server)->port());
  EXPECT_NE((*server)->Stderr().find("accepting connections again"), std::string::npos) << (*server)->Stderr();
  clients.clear();
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Stderr();
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  tinyddp::dist::testing::RunStoreServerChildIfAsked();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
