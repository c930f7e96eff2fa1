// rendezvous_bench: how the job's store scales with the number of ranks. N simulated ranks meet at one
// TCPStoreServer the way InitProcessGroup has them meet (dist/rendezvous.cc, dist/init.cc): each opens an
// authenticated connection (the job secret, a TCPStore client), Sets its own key (a 64-byte address, as a
// rank publishes where it listens), passes the store barrier (StoreBarrier: an Add, then a Wait on the
// last arrival's key) and Gets rank 0's key (what every rank reads after it: NCCL's unique id, the
// coordinator's address). Gloo's full mesh, where each rank also reads every other rank's key (N^2 Gets),
// is not measured: the store is not what limits it (docs/performance.md).
//
//   ./bazelw run -c opt //bench:rendezvous_bench -- --ranks=256,1024,4096,8192
//   python3 bench/reference/torch_tcpstore_rendezvous.py --ranks=256,1024,4096,8192   (PyTorch's TCPStore)
//
// The server runs in a process of its own (dist/testing/store_abuse.h), as the launcher hosts it for a
// job: loopback, a job secret, the default limits. This process plays every rank, one thread each (every
// rank's thread is a real client with its own socket; the key derivation from the secret is done once per
// process, as on a real rank). For each N: wall time from the first connect to the last rank's Get, how
// long the slowest connect took, the server's peak resident memory (VmHWM) and its threads at the peak.
// One JSON line per N for scripts.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/store/store_barrier.h"
#include "dist/store/tcp_store.h"
#include "dist/testing/store_abuse.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, ranks, "256,1024,4096,8192", "comma-separated numbers of simulated ranks");
ABSL_FLAG(int, timeout_s, 300, "bound on every rank's connect and calls, in seconds");

namespace tinyddp::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSecret[] = "bench-secret-7c1e5b9d2a4f6e8013579bdf";

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Every simulated rank holds a socket here and the server one more: raise the soft limit to the hard one
// before the server process starts (it inherits it).
void RaiseFileLimit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

struct Result {
  int ranks = 0;
  int failed = 0;
  std::string first_error;
  double wall_s = 0, slowest_connect_s = 0;
  int64_t server_peak_kib = 0;
  int server_threads = 0;
};

Result Rendezvous(int ranks, std::chrono::milliseconds timeout) {
  Result result;
  result.ranks = ranks;
  auto server = testing::StoreServerProcess::Start({.secret = kSecret});
  if (!server.ok()) {
    result.failed = ranks;
    result.first_error = server.status().ToString();
    return result;
  }
  const int port = (*server)->port();
  std::atomic<int> failed{0};
  std::atomic<int64_t> slowest_connect_us{0};
  std::mutex error_mu;
  std::vector<std::unique_ptr<TCPStore>> stores(ranks);  // held to the end: ranks keep their connection
  std::atomic<int> done{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](const absl::Status& s) {
        if (failed.fetch_add(1) == 0) {
          std::lock_guard<std::mutex> lock(error_mu);
          result.first_error = absl::StrCat("rank ", rank, ": ", s.ToString());
        }
      };
      const Clock::time_point began = Clock::now();
      auto store = TCPStore::Create(
          {.host = "127.0.0.1", .port = port, .is_server = false, .timeout = timeout, .secret = kSecret});
      if (!store.ok()) return fail(store.status());
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - began).count();
      int64_t seen = slowest_connect_us.load();
      while (us > seen && !slowest_connect_us.compare_exchange_weak(seen, us)) {
      }
      stores[rank] = std::move(*store);
      TCPStore& s = *stores[rank];
      // The rank's address, as a rank publishes where its transport listens.
      const std::string address = absl::StrCat("10.0.", rank / 256, ".", rank % 256, ":", 40000 + rank % 20000,
                                               std::string(48, 'a'));
      if (absl::Status set = s.Set(absl::StrCat("rank/", rank), address); !set.ok()) return fail(set);
      if (absl::Status b = StoreBarrier(s, "init", ranks, timeout); !b.ok()) return fail(b);
      auto root = s.Get("rank/0");
      if (!root.ok()) return fail(root.status());
      done.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  result.wall_s = Seconds(Clock::now() - start);
  result.failed = failed.load();
  result.slowest_connect_s = slowest_connect_us.load() / 1e6;
  result.server_peak_kib = (*server)->PeakRssKiB();
  result.server_threads = (*server)->Threads();  // every connection still open
  stores.clear();
  (*server)->Stop();
  return result;
}

int Main() {
  RaiseFileLimit();
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  const std::chrono::milliseconds timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  std::printf("rendezvous through one TCPStoreServer (authenticated, loopback), RLIMIT_NOFILE %llu\n",
              static_cast<unsigned long long>(limit.rlim_cur));
  std::printf("%8s %10s %16s %18s %14s %8s\n", "ranks", "wall s", "slowest connect", "server peak MiB",
              "server threads", "failed");
  std::vector<nlohmann::json> lines;
  for (absl::string_view field : absl::StrSplit(absl::GetFlag(FLAGS_ranks), ',', absl::SkipEmpty())) {
    int ranks = 0;
    if (!absl::SimpleAtoi(field, &ranks) || ranks < 1) {
      std::fprintf(stderr, "--ranks: '%.*s' is not a number of ranks\n", static_cast<int>(field.size()), field.data());
      return 2;
    }
    const Result r = Rendezvous(ranks, timeout);
    std::printf("%8d %10.2f %15.2fs %18.1f %14d %8d\n", r.ranks, r.wall_s, r.slowest_connect_s,
                r.server_peak_kib / 1024.0, r.server_threads, r.failed);
    if (!r.first_error.empty()) std::printf("    first failure: %s\n", r.first_error.c_str());
    std::fflush(stdout);
    lines.push_back({{"bench", "rendezvous"}, {"store", "tinyddp"}, {"ranks", r.ranks}, {"wall_s", r.wall_s},
                     {"slowest_connect_s", r.slowest_connect_s}, {"server_peak_kib", r.server_peak_kib},
                     {"server_threads", r.server_threads}, {"failed", r.failed}});
  }
  for (const auto& line : lines) std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  tinyddp::dist::testing::RunStoreServerChildIfAsked();
  absl::ParseCommandLine(argc, argv);
  return tinyddp::dist::Main();
}
