// store_abuse_rss: how much memory the job's store server (the launcher's TCPStoreServer) needs while
// hostile and broken clients abuse it, and whether an honest client is still served after each abuse.
//
//   ./bazelw run -c opt //bench:store_abuse_rss
//   flags: --idle=8000 (job connections held idle)  --strangers=2000 (connections that never say hello)
//          --slowloris=500  --wait_keys=65536 (a Wait on the limit)  --secret_tries=1000

//
// The server runs in a process of its own (dist/testing/store_abuse.h), set up as `launch` sets it up for
// a one-node job: loopback, with a job secret. This process plays every client. After each phase the
// table shows the server's resident memory (VmRSS), its peak since start (VmHWM) and whether an honest
// client (with the secret) could connect, Set and Get. The target is a peak under 128 MiB: a full table
// (its cap, 64 MiB, with refused 16 MiB writes passing through) or 8000 connections, not both. A last phase
// runs a second server limited to a few file descriptors and reports the CPU it burns while it has none
// left (a spinning accept loop would burn a whole core). One JSON line at the end for scripts.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/tcp_store.h"
#include "dist/testing/store_abuse.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int, idle, 8000, "job connections (with the secret) held open and idle (the limit is 8192)");
ABSL_FLAG(int, strangers, 2000, "connections that never say hello");
ABSL_FLAG(int, slowloris, 500, "connections trickling a hello one byte at a time");
ABSL_FLAG(int, wait_keys, 65536, "keys in the big Wait (the limit is kMaxStoreWaitKeys)");
ABSL_FLAG(int, secret_tries, 1000, "connections with a wrong or missing secret");

namespace tinyddp::dist {
namespace {

using internal::StoreOp;
using internal::StoreRequest;
using testing::RawStoreConnection;
using testing::StoreServerProcess;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "bench-secret-0f3a9c1e5b7d2468ace0";

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Bytes Header(uint32_t len) {
  return Bytes{uint8_t(len), uint8_t(len >> 8), uint8_t(len >> 16), uint8_t(len >> 24)};
}

std::vector<RawStoreConnection> Open(int port, int n, bool hello) {
  std::vector<RawStoreConnection> out;
  for (int i = 0; i < n; ++i) {
    auto c = RawStoreConnection::Connect(port);
    if (!c.ok()) break;
    if (hello && !c->Hello(kSecret).ok()) break;
    out.push_back(std::move(*c));
  }
  return out;
}

// An honest client: connect with the secret, Set, Get. Returns the time it took, or -1 if it failed.
double HonestClientMs(int port) {
  const auto start = Clock::now();
  auto store = TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = std::chrono::seconds(30),
                                 .secret = kSecret});
  if (!store.ok()) return -1;
  if (!(*store)->Set("honest/key", std::string("value")).ok()) return -1;
  auto got = (*store)->GetString("honest/key");
  return got.ok() && *got == "value" ? Ms(Clock::now() - start) : -1;
}

// Median latency of n Sets from one client.
double MedianSetMs(TCPStore& store, int n) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t = Clock::now();
    (void)store.Set(absl::StrCat("latency/", i), std::string("x"));
    ms.push_back(Ms(Clock::now() - t));
  }
  std::nth_element(ms.begin(), ms.begin() + n / 2, ms.end());
  return ms[n / 2];
}

struct Row {
  std::string phase;
  double rss_mib, peak_mib, honest_ms;
  std::string note;
};

class Bench {
 public:
  explicit Bench(StoreServerProcess& server) : server_(server) {}

  // Measures while the abuse is still in place (connections held open), then checks the honest client.
  void Record(const std::string& phase, const std::string& note = "") {
    server_.WaitUntilQuiet(std::chrono::seconds(30));
    rows_.push_back({phase, server_.RssKiB() / 1024.0, server_.PeakRssKiB() / 1024.0,
                     HonestClientMs(server_.port()), note});
    const Row& r = rows_.back();
    std::printf("%-52s %9.1f %9.1f %12s  %s\n", r.phase.c_str(), r.rss_mib, r.peak_mib,
                r.honest_ms < 0 ? "FAILED" : absl::StrCat(static_cast<int>(r.honest_ms + 0.5), " ms").c_str(),
                r.note.c_str());
    std::fflush(stdout);
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  StoreServerProcess& server_;
  std::vector<Row> rows_;
};

void RunPhases(StoreServerProcess& server, Bench& bench) {
  const int port = server.port();
  bench.Record("idle server, one honest client served");

  {  // The incident: frames declaring 1 GiB, from the job (after the hello) and from strangers (before).
    std::vector<RawStoreConnection> job = Open(port, 3, true), strangers = Open(port, 3, false);
    for (auto* group : {&job, &strangers}) {
      for (auto& c : *group) (void)c.SendBytes(Header(1u << 30).data(), 4);
    }
    int refused = 0;
    for (auto* group : {&job, &strangers}) {
      for (auto& c : *group) refused += c.ReadResponse().ok() ? 0 : 1;
    }
    bench.Record("6 frames declaring 1 GiB (3 with the secret)", absl::StrCat(refused, "/6 refused with an error"));
  }
  {  // Frames just under the limit, of which 1000 bytes arrive; held open (each must finish within 60 s).
    std::vector<RawStoreConnection> partial = Open(port, 64, true);
    const Bytes some(1000, 0x33);
    for (auto& c : partial) {
      (void)c.SendBytes(Header(internal::kMaxRequestBytes).data(), 4);
      (void)c.SendBytes(some.data(), some.size());
    }
    bench.Record("64 frames declaring 33 MiB, 1000 bytes sent, held", "would be 2.1 GB if allocated up front");
  }
  {  // Over-limit keys and values, sent in full by a raw client (the TCPStore client refuses them itself).
    RawStoreConnection c = std::move(Open(port, 1, true).front());
    int refused = 0;
    for (int i = 0; i < 100; ++i) {
      refused += c.Call(StoreRequest{.op = StoreOp::kSet, .key = std::string(5000, 'k'), .value = {1}}).ok() ? 0 : 1;
    }
    for (int i = 0; i < 8; ++i) {
      refused += c.Call(StoreRequest{.op = StoreOp::kSet, .key = "v", .value = Bytes(kMaxStoreValueBytes + 1)}).ok()
                     ? 0
                     : 1;
    }
    bench.Record("100 keys of 5 KB, 8 values of 16 MiB + 1", absl::StrCat(refused, "/108 refused"));
  }
  {  // A client with the secret fills the table with values at their limit: the table's cap stops it.
    auto filler = TCPStore::Create({.host = "127.0.0.1", .port = port, .secret = kSecret});
    const Bytes value(kMaxStoreValueBytes, 0x21);
    int stored = 0;
    for (int i = 0; filler.ok() && i < 16; ++i) stored += (*filler)->Set(absl::StrCat("fill/", i), value).ok() ? 1 : 0;
    bench.Record("16 values of 16 MiB set (the table's cap: 64 MiB)",
                 absl::StrCat(stored, " stored, ", 16 - stored, " refused"));
    for (int i = 0; filler.ok() && i < stored; ++i) (void)(*filler)->Delete(absl::StrCat("fill/", i));
  }
  {  // Slowloris before the hello: each stranger trickles a 100-byte hello, one byte every 100 ms, for
     // 11 s. Past 64 pending hellos the oldest are evicted; the rest meet the 10 s hello deadline.
    std::vector<RawStoreConnection> slow = Open(port, absl::GetFlag(FLAGS_slowloris), false);
    const Bytes hello_header = Header(100);
    for (int step = 0; step < 110; ++step) {
      const uint8_t byte = step < 4 ? hello_header[step] : 0x01;
      for (auto& c : slow) (void)c.SendBytes(&byte, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    int cut = 0;
    for (auto& c : slow) cut += c.ClosedByServerWithin(std::chrono::milliseconds(0)) ? 1 : 0;
    bench.Record(absl::StrCat(slow.size(), " slowloris hellos, one byte per 100 ms for 11 s"),
                 absl::StrCat(cut, " cut off (evicted past 64 pending, or at the 10 s deadline)"));
  }
  {
    std::vector<RawStoreConnection> strangers = Open(port, absl::GetFlag(FLAGS_strangers), false);
    bench.Record(absl::StrCat(strangers.size(), " strangers' connections, no hello, held"));
  }
  {
    std::vector<RawStoreConnection> idle = Open(port, absl::GetFlag(FLAGS_idle), true);
    bench.Record(absl::StrCat(idle.size(), " idle job connections (with the secret), held"));
  }
  {  // A Wait claiming 4M keys; then a real Wait on the limit, pending while other clients Set.
    RawStoreConnection c = std::move(Open(port, 1, true).front());
    Bytes wait = {uint8_t(StoreOp::kWait)};
    const Bytes count = Header(4u << 20);
    wait.insert(wait.end(), count.begin(), count.end());
    (void)c.SendFrame(wait);
    const bool refused = !c.ReadResponse().ok();
    auto setter = TCPStore::Create({.host = "127.0.0.1", .port = port, .secret = kSecret});
    const double before_ms = setter.ok() ? MedianSetMs(**setter, 1000) : -1;
    std::vector<std::string> keys;
    for (int i = 0; i < absl::GetFlag(FLAGS_wait_keys); ++i) keys.push_back(absl::StrCat("never/rank/", i, "/addr"));
    (void)c.SendFrame(internal::EncodeRequest(
        StoreRequest{.op = StoreOp::kWait, .keys = keys, .number = 3600 * 1000}));  // an hour: it stays pending
    server.WaitUntilQuiet(std::chrono::seconds(30));
    const double during_ms = setter.ok() ? MedianSetMs(**setter, 1000) : -1;
    bench.Record(absl::StrCat("Wait on 4M keys; Wait on ", keys.size(), " keys, pending"),
                 absl::StrCat(refused ? "4M refused; " : "4M NOT refused; ", "median Set ", before_ms,
                              " ms before, ", during_ms, " ms during"));
  }
  {
    int refused = 0;
    for (int i = 0; i < absl::GetFlag(FLAGS_secret_tries); ++i) {
      auto c = RawStoreConnection::Connect(port);
      if (c.ok()) refused += c->Hello(i % 2 ? "" : "not-the-secret").ok() ? 0 : 1;
    }
    bench.Record(absl::StrCat(absl::GetFlag(FLAGS_secret_tries), " connections with a wrong or no secret"),
                 absl::StrCat(refused, " refused"));
  }
}

// A second server with 16 spare descriptors, 64 clients: reports the CPU it uses while out of them.
std::string RunOutOfDescriptors() {
  auto server = StoreServerProcess::Start({.secret = kSecret, .spare_fds = 16});
  if (!server.ok()) return "could not start";
  std::vector<RawStoreConnection> held;
  for (int i = 0; i < 64; ++i) {
    auto c = RawStoreConnection::Connect((*server)->port());
    if (!c.ok()) break;
    (void)c->SendHelloOnly();
    held.push_back(std::move(*c));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double cpu = (*server)->CpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double burned = (*server)->CpuSeconds() - cpu;
  const bool said = (*server)->Stderr().find("cannot accept") != std::string::npos;
  held.resize(8);
  const double honest = HonestClientMs((*server)->port());
  return absl::StrCat(said ? "ran out of descriptors; " : "did NOT run out; ", "CPU ", burned,
                      " s in 2 s; honest client afterwards: ", honest < 0 ? "FAILED" : "served");
}

int Main() {
  rlimit r;  // this process holds thousands of client connections
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  auto server = StoreServerProcess::Start({.secret = kSecret});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("%-52s %9s %9s %12s  %s\n", "abuse (the server's state while it lasts)", "RSS MiB", "peak MiB",
              "honest client", "note");
  Bench bench(**server);
  RunPhases(**server, bench);
  const std::string emfile = RunOutOfDescriptors();
  std::printf("out of file descriptors (second server, 16 spare, 64 clients): %s\n", emfile.c_str());
  double peak = 0;
  bool all_served = true;
  nlohmann::json phases = nlohmann::json::array();
  for (const Row& row : bench.rows()) {
    peak = std::max(peak, row.peak_mib);
    all_served = all_served && row.honest_ms >= 0;
    phases.push_back({{"phase", row.phase}, {"rss_mib", row.rss_mib}, {"peak_mib", row.peak_mib},
                      {"honest_ms", row.honest_ms}, {"note", row.note}});
  }
  std::printf("peak RSS of the server: %.1f MiB (target: under 128 MiB); honest client served after every phase: %s\n",
              peak, all_served ? "yes" : "NO");
  std::printf("%s\n", nlohmann::json({{"bench", "store_abuse_rss"}, {"peak_rss_mib", peak},
                                      {"honest_served", all_served}, {"out_of_fds", emfile}, {"phases", phases}})
                          .dump()
                          .c_str());
  const int code = (*server)->Stop();
  return all_served && code == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  tinyddp::dist::testing::RunStoreServerChildIfAsked();
  absl::ParseCommandLine(argc, argv);
  return tinyddp::dist::Main();
}
