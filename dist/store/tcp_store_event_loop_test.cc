// The store server as one event loop, over real sockets and real processes: one thread serves thousands
// of connections, a slow reader stalls nobody, a parked Get/Wait is answered by the Set that comes later,
// frames may arrive in any pieces, strangers cannot crowd out the job's ranks, and at the descriptor limit
// a new client is told the limit and how to raise it. No assertion depends on timing: deadlines only keep
// a broken server from hanging the test.
#include <sys/resource.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store_barrier.h"
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

constexpr char kSecret[] = "3f9a1c77e2b04d58-event-loop-secret";

std::unique_ptr<TCPStoreServer> StartServer(TCPStoreServerOptions options = {}) {
  options.secret = kSecret;
  auto server = TCPStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

absl::StatusOr<std::unique_ptr<TCPStore>> Connect(int port, std::chrono::milliseconds timeout = 30s) {
  return TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = timeout, .secret = kSecret});
}

RawStoreConnection SaidHello(int port) {
  auto c = RawStoreConnection::Connect(port);
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Hello(kSecret).ok());
  return std::move(*c);
}

Bytes Frame(const StoreRequest& request) {
  const Bytes body = internal::EncodeRequest(request);
  const uint32_t len = static_cast<uint32_t>(body.size());
  Bytes frame = {uint8_t(len), uint8_t(len >> 8), uint8_t(len >> 16), uint8_t(len >> 24)};
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(StoreEventLoop, OneThreadServesTwoThousandAuthenticatedConnections) {
  auto server = testing::StoreServerProcess::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kClients = 2000;
  std::vector<std::unique_ptr<TCPStore>> clients;
  for (int i = 0; i < kClients; ++i) {
    auto c = Connect((*server)->port());
    ASSERT_TRUE(c.ok()) << "client " << i << ": " << c.status();
    ASSERT_TRUE((*c)->Set(absl::StrCat("rank/", i), absl::StrCat("addr-", i * 7919)).ok());
    clients.push_back(std::move(*c));
  }
  // Every connection is still open, and each reads another's key through it.
  for (int i = 0; i < kClients; i += 97) {
    auto v = clients[i]->GetString(absl::StrCat("rank/", (i + 1) % kClients));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, absl::StrCat("addr-", ((i + 1) % kClients) * 7919));
  }
  EXPECT_EQ((*server)->Threads(), 2) << "the process's main thread and the loop, whatever the connections";
  clients.clear();
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Stderr();
}

TEST(StoreEventLoop, AGetParkedOnTheServerIsAnsweredByASetThatComesLater) {
  auto server = StartServer();
  RawStoreConnection getter = SaidHello(server->port());
  RawStoreConnection waiter = SaidHello(server->port());
  ASSERT_TRUE(getter.SendFrame(internal::EncodeRequest({.op = StoreOp::kGet, .key = "id", .number = 60000})).ok());
  ASSERT_TRUE(waiter.SendFrame(internal::EncodeRequest(
      {.op = StoreOp::kWait, .keys = {"c", "a", "b"}, .number = 60000})).ok());
  auto setter = Connect(server->port());
  ASSERT_TRUE(setter.ok());
  // The keys arrive in another order than the Wait lists them, one by Add, one by CompareSet.
  ASSERT_TRUE((*setter)->Set("a", std::string("1")).ok());
  ASSERT_TRUE((*setter)->Add("b", 5).ok());
  ASSERT_TRUE((*setter)->CompareSet("c", {}, Bytes{7}).ok());
  EXPECT_TRUE(waiter.ReadResponse().ok());
  ASSERT_TRUE((*setter)->Set("id", std::string("nccl-unique-id")).ok());
  EXPECT_TRUE(getter.ReadResponse().ok());
  // A parked Get whose deadline passes is answered DeadlineExceeded naming the key, and the connection lives.
  absl::Status late = getter.Call({.op = StoreOp::kGet, .key = "never", .number = 50});
  EXPECT_TRUE(absl::IsDeadlineExceeded(late) && Contains(late, "'never'")) << late;
  EXPECT_TRUE(getter.Call({.op = StoreOp::kGet, .key = "id", .number = 1000}).ok());
}

TEST(StoreEventLoop, FramesArrivingInPiecesOrSeveralAtOnceAreEachAnswered) {
  auto server = StartServer();
  RawStoreConnection c = SaidHello(server->port());
  // A Set one byte at a time (the header split too), then three requests in one write.
  const Bytes set = Frame({.op = StoreOp::kSet, .key = "piecewise", .value = Bytes(300, 0x61)});
  for (uint8_t byte : set) ASSERT_TRUE(c.SendBytes(&byte, 1).ok());
  EXPECT_TRUE(c.ReadResponse().ok());
  Bytes three;
  for (const StoreRequest& r : {StoreRequest{.op = StoreOp::kAdd, .key = "n", .number = 2},
                                StoreRequest{.op = StoreOp::kGet, .key = "piecewise", .number = 1000},
                                StoreRequest{.op = StoreOp::kNumKeys}}) {
    const Bytes f = Frame(r);
    three.insert(three.end(), f.begin(), f.end());
  }
  ASSERT_TRUE(c.SendBytes(three.data(), three.size()).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(c.ReadResponse().ok()) << "answer " << i;
  auto store = Connect(server->port());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->GetString("piecewise"), std::string(300, 'a'));
}

TEST(StoreEventLoop, AClientThatNeverReadsItsAnswersStallsNobodyAndIsCutOff) {
  TCPStoreServerOptions options;
  options.frame_timeout = 500ms;
  auto server = StartServer(options);
  auto store = Connect(server->port());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("big", std::string(8 << 20, 'b')).ok());
  // Forty Gets of an 8 MiB value, pipelined, and not one answer read: far more than the socket buffers hold.
  RawStoreConnection slow = SaidHello(server->port());
  Bytes gets;
  for (int i = 0; i < 40; ++i) {
    const Bytes f = Frame({.op = StoreOp::kGet, .key = "big", .number = 1000});
    gets.insert(gets.end(), f.begin(), f.end());
  }
  ASSERT_TRUE(slow.SendBytes(gets.data(), gets.size()).ok());
  // Meanwhile every other client is served.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*store)->Set(absl::StrCat("k", i), std::string("v")).ok());
  EXPECT_EQ(*(*store)->NumKeys(), 21);
  for (int i = 0; i < 600 && server->open_connections() > 1; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(server->open_connections(), 1) << "an answer not taken within frame_timeout closes the connection";
}

TEST(StoreEventLoop, AThousandSilentStrangersDoNotKeepTheJobsRanksFromMeeting) {
  auto server = testing::StoreServerProcess::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<RawStoreConnection> strangers;
  for (int i = 0; i < 1000; ++i) {
    auto c = RawStoreConnection::Connect((*server)->port());
    ASSERT_TRUE(c.ok()) << c.status();
    strangers.push_back(std::move(*c));
  }
  constexpr int kRanks = 64;
  std::vector<absl::Status> results(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      auto store = Connect((*server)->port());
      if (!store.ok()) return void(results[rank] = store.status());
      absl::Status s = (*store)->Set(absl::StrCat("rank/", rank), std::string("addr"));
      if (s.ok()) s = StoreBarrier(**store, "start", kRanks, 60s);
      if (s.ok()) s = (*store)->Get("rank/0").status();
      results[rank] = s;
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
  strangers.clear();
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Stderr();
}

TEST(StoreEventLoop, HostileClientsAreStillRefusedWhileEightThousandRanksHoldTheirConnections) {
  TCPStoreServerOptions options;
  options.hello_timeout = 300ms;
  options.frame_timeout = 300ms;
  auto server = StartServer(options);
  constexpr int kRanks = 8192;
  std::vector<RawStoreConnection> ranks;
  for (int i = 0; i < kRanks; ++i) ranks.push_back(SaidHello(server->port()));
  ASSERT_EQ(server->open_connections(), kRanks);
  // A frame declaring 1 GiB, a trickled frame, a silent stranger, a wrong secret: each refused as alone.
  RawStoreConnection huge = SaidHello(server->port()), slow = SaidHello(server->port());
  const uint8_t gib[4] = {0, 0, 0, 0x40}, header[4] = {100, 0, 0, 0}, byte = 0x42;
  ASSERT_TRUE(huge.SendBytes(gib, 4).ok());
  absl::Status refused = huge.ReadResponse();
  EXPECT_TRUE(absl::IsInvalidArgument(refused) && Contains(refused, "kMaxRequestBytes")) << refused;
  ASSERT_TRUE(slow.SendBytes(header, 4).ok() && slow.SendBytes(&byte, 1).ok());
  auto stranger = RawStoreConnection::Connect(server->port());
  ASSERT_TRUE(stranger.ok());
  EXPECT_TRUE(stranger->ClosedByServerWithin(30s)) << "a silent stranger is closed at the hello deadline";
  for (int i = 0; i < 600 && server->open_connections() > kRanks; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(server->open_connections(), kRanks) << "the 1 GiB frame and the trickled one are cut off";
  auto wrong = RawStoreConnection::Connect(server->port());
  ASSERT_TRUE(wrong.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(wrong->Hello("not-the-job-secret-at-all-0123456789")));
  // Every rank's connection still works.
  for (int i = 0; i < kRanks; i += 1021) {
    EXPECT_TRUE(ranks[i].Call({.op = StoreOp::kAdd, .key = "alive", .number = 1}).ok()) << "rank " << i;
  }
  auto honest = Connect(server->port());
  ASSERT_TRUE(honest.ok()) << honest.status();
  EXPECT_EQ(*(*honest)->GetString("alive"), "9");
}

TEST(StoreEventLoop, AtTheDescriptorLimitANewClientIsToldTheLimitAndHowToRaiseIt) {
  // The server's process may hold about 8 connections; ranks connect until one is refused.
  auto server = testing::StoreServerProcess::Start({.secret = kSecret, .spare_fds = 8});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<TCPStore>> ranks;
  absl::Status refused;
  while (refused.ok() && ranks.size() < 64) {
    auto c = Connect((*server)->port(), 2s);
    if (c.ok()) ranks.push_back(std::move(*c));
    refused = c.status();
  }
  EXPECT_GE(ranks.size(), 6u) << "the limit leaves room for about 8";
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(Contains(refused, "RLIMIT_NOFILE") && Contains(refused, "ulimit")) << refused;
  EXPECT_NE((*server)->Stderr().find("cannot accept a connection"), std::string::npos) << (*server)->Stderr();
  ranks.pop_back();  // one leaves: its descriptor is free again
  auto again = Connect((*server)->port());
  EXPECT_TRUE(again.ok()) << again.status();
  again->reset();
  ranks.clear();
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Stderr();
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  tinyddp::dist::testing::RunStoreServerChildIfAsked();
  rlimit limit{};  // this process holds thousands of connections too
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
