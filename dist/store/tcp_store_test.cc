// TCPStore over real loopback sockets: the shared conformance checks, many client threads, several
// client processes (this binary re-executes itself as the child, so it also runs outside Bazel),
// timeouts, a port in use, an unreachable server, a server that goes away mid-call, and where the
// server listens for each kind of job address. (Hostile clients: tcp_store_abuse_test.cc.)
#include "dist/store/tcp_store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/store/internal/socket.h"
#include "dist/store/prefix_store.h"
#include "dist/store/store_barrier.h"
#include "dist/testing/store_conformance.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

constexpr char kChildFlag[] = "--tcp_store_child=";

std::unique_ptr<TCPStore> StartServer() {
  auto store = TCPStore::Create({.host = "127.0.0.1", .port = 0, .is_server = true,
                                 .timeout = std::chrono::seconds(30)});
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

std::shared_ptr<Store> Client(int port) {
  auto store = TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = std::chrono::seconds(30)});
  EXPECT_TRUE(store.ok()) << store.status();
  return std::shared_ptr<Store>(std::move(*store));
}

// A port nothing listens on: bind a free one, then close it.
int ClosedPort() {
  int port = 0;
  auto s = internal::Listen("", 0, &port);
  EXPECT_TRUE(s.ok());
  return port;
}

TEST(TCPStore, MeetsTheStoreSemantics) {
  auto server = StartServer();
  const int port = server->port();
  ASSERT_GT(port, 0) << "port 0 must be replaced by the port actually bound";
  auto client = Client(port);
  testing::CheckSetGetDeleteNumKeys(*client);
  testing::CheckAdd(*client);
  testing::CheckCompareSet(*server);
  testing::CheckTimeoutsNameTheKeys(*client);
  testing::CheckBlockingGetWakesOnSet([&] { return Client(port); });
  testing::CheckLimitsAreEnforcedWithClearErrors(*client);
  // 4096 round trips; the abuse test pipelines Sets against a Wait on kMaxStoreWaitKeys.
  testing::CheckWaitOnManyKeysEndsWhenTheLastArrives([&] { return Client(port); }, 4096);
}

TEST(TCPStore, CountsExactlyUnderManyConcurrentClients) {
  auto server = StartServer();
  testing::CheckConcurrentAddsAreAtomic([&] { return Client(server->port()); }, 16);
}

TEST(TCPStore, OneClientSharedByThreadsDoesNotSerializeBlockingCalls) {
  // Thread A blocks in Get("b_done") on the shared client; thread B must still be able to Set through
  // the same client, or the two would deadlock until the timeout.
  auto server = StartServer();
  auto shared = Client(server->port());
  absl::StatusOr<std::string> got;
  std::thread a([&] { got = shared->GetString("b_done"); });
  std::thread b([&] { EXPECT_TRUE(shared->Set("b_done", std::string("yes")).ok()); });
  a.join();
  b.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "yes");
}

TEST(TCPStore, PrefixStoreAndBarrierWorkAcrossClients) {
  auto server = StartServer();
  constexpr int kRanks = 4;
  std::vector<std::thread> ranks;
  std::vector<std::string> seen(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      PrefixStore pg("pg", Client(server->port()));
      ASSERT_TRUE(pg.Set(absl::StrCat("addr/", r), absl::StrCat("host", r * 7)).ok());
      ASSERT_TRUE(StoreBarrier(pg, "init", kRanks, std::chrono::seconds(30)).ok());
      seen[r] = *pg.GetString(absl::StrCat("addr/", (r + 1) % kRanks));  // set before the barrier
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(seen[r], absl::StrCat("host", ((r + 1) % kRanks) * 7));
}

// Child process body: connect, register, wait for the parent's go, answer with a value only it knows.
int RunChild(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  int port = 0, id = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &port) || !absl::SimpleAtoi(parts[1], &id)) return 90;
  auto store = TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = std::chrono::seconds(30)});
  if (!store.ok()) return 91;
  if (!(*store)->Add("procs/arrived", 1).ok()) return 92;
  auto go = (*store)->GetString("procs/go");
  if (!go.ok()) return 93;
  if (!(*store)->Set(absl::StrCat("procs/answer/", id), absl::StrCat(*go, "-", id * id + 3)).ok()) return 94;
  return 0;
}

TEST(TCPStore, ServesSeveralClientProcesses) {
  auto server = StartServer();
  constexpr int kProcs = 3;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    const std::string flag = absl::StrCat(kChildFlag, server->port(), ":", i);
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", "tcp_store_test", flag.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  // The children block in Get("procs/go") until it is set, whichever of them connects first.
  ASSERT_TRUE(server->Set("procs/go", std::string("token")).ok());
  for (int i = 0; i < kProcs; ++i) {
    auto answer = server->GetString(absl::StrCat("procs/answer/", i));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, absl::StrCat("token-", i * i + 3));
  }
  EXPECT_EQ(*server->Add("procs/arrived", 0), kProcs);
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);  // each child has answered, so it is exiting
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

TEST(TCPStore, SecondServerOnAUsedPortFailsClearly) {
  auto first = StartServer();
  auto second = TCPStore::Create({.port = first->port(), .is_server = true, .timeout = std::chrono::seconds(1)});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  const std::string message(second.status().message());
  EXPECT_NE(message.find("already in use"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(first->port())), std::string::npos) << message;
}

TEST(TCPStore, ConnectingToAClosedPortGivesUpAfterTheTimeoutWithAHint) {
  const int port = ClosedPort();
  auto store = TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = std::chrono::milliseconds(300)});
  ASSERT_FALSE(store.ok());
  const std::string message(store.status().message());
  EXPECT_NE(message.find(absl::StrCat("127.0.0.1:", port)), std::string::npos) << message;
  EXPECT_NE(message.find("connection refused"), std::string::npos) << message;
  EXPECT_NE(message.find("MASTER_ADDR/MASTER_PORT"), std::string::npos) << message;
}

TEST(TCPStore, UnknownHostIsReportedWithoutWaiting) {
  auto store = TCPStore::Create({.host = "no-such-host.invalid", .port = 29500, .timeout = std::chrono::seconds(60)});
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("no-such-host.invalid"), std::string::npos) << store.status();
}

TEST(TCPStore, ClientsFailInsteadOfHangingWhenTheServerGoesAway) {
  auto server = StartServer();
  // Create() leaves one connection open and idle; the waiter's Get uses it, so whether its request
  // reaches the server before or after the shutdown, it ends on that connection with an error.
  auto client = Client(server->port());
  client->set_timeout(std::chrono::seconds(60));
  absl::StatusOr<Bytes> got;
  std::thread waiter([&] { got = client->Get("never"); });
  server.reset();
  waiter.join();
  EXPECT_FALSE(got.ok());
  EXPECT_FALSE(client->Set("after", std::string("x")).ok()) << "a store whose server is gone must fail fast";
}

// An IPv4 address of this machine other than loopback, or "" when it has none (a network-less sandbox).
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const in_addr ip = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr;
    if ((ntohl(ip.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &ip, text, sizeof(text)) != nullptr) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

bool Reachable(const std::string& ip, int port) {
  return internal::Connect(ip, port, internal::DeadlineAfter(std::chrono::milliseconds(200))).ok();
}

std::unique_ptr<TCPStoreServer> ServerFor(const std::string& host) {
  TCPStoreServerOptions options;
  options.host = host;
  auto server = TCPStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << host << ": " << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(TCPStoreServer, ALoopbackAddressListensOnLoopbackOnly) {
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    auto server = ServerFor(host);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(server->listening_on(), "127.0.0.1") << host;
    EXPECT_TRUE(Reachable("127.0.0.1", server->port())) << host;
    const std::string other = NonLoopbackAddress();
    if (!other.empty()) EXPECT_FALSE(Reachable(other, server->port())) << host << " must not listen on " << other;
  }
}

TEST(TCPStoreServer, AnAddressOfThisMachineListensOnThatAddressOnly) {
  const std::string ip = NonLoopbackAddress();
  if (ip.empty()) GTEST_SKIP() << "this machine has no IPv4 address but loopback";
  auto server = ServerFor(ip);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->listening_on(), ip);
  EXPECT_EQ(server->local_address(), ip) << "rank 0 must connect where its server listens";
  EXPECT_TRUE(Reachable(ip, server->port()));
  EXPECT_FALSE(Reachable("127.0.0.1", server->port()));
  // Rank 0 hosting the store on that address reaches its own server.
  auto rank0 = TCPStore::Create({.host = ip, .port = 0, .is_server = true, .timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  EXPECT_TRUE((*rank0)->Set("from/rank0", std::string("ok")).ok());
}

TEST(TCPStoreServer, AHostNameOrAnAddressOfAnotherMachineListensOnEveryInterface) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  // 192.0.2.1 is reserved for documentation (RFC 5737): no machine has it, like a NAT's public address.
  for (const std::string host : {std::string(name), std::string("192.0.2.1"), std::string("")}) {
    auto server = ServerFor(host);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(server->listening_on().rfind("every interface", 0), 0u) << host << ": " << server->listening_on();
    EXPECT_TRUE(Reachable(server->local_address(), server->port())) << host;
    const std::string other = NonLoopbackAddress();
    if (!other.empty()) {
      EXPECT_TRUE(Reachable(other, server->port())) << host;
    }
  }
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], tinyddp::dist::kChildFlag, std::strlen(tinyddp::dist::kChildFlag)) == 0) {
      return tinyddp::dist::RunChild(argv[i] + std::strlen(tinyddp::dist::kChildFlag));
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
