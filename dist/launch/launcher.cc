// RunLauncher: see launcher.h. Keys the launchers share live under "tinyddp/launch/" in the job's
// store, apart from anything the workers write.
#include "dist/launch/launcher.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/launch/env.h"
#include "dist/launch/job_flight_recorder.h"
#include "dist/launch/supervisor.h"
#include "dist/store/store_secret.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_server.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {
namespace {

constexpr char kAbortKey[] = "tinyddp/launch/abort";
constexpr char kFinishedKey[] = "tinyddp/launch/finished";
constexpr char kAllFinishedKey[] = "tinyddp/launch/all_finished";

void Say(const std::string& line) { std::fprintf(stderr, "launch: %s\n", line.c_str()); }

// Step 2: every launcher claims its node_rank and publishes its worker count; all must agree.
absl::Status MeetOtherLaunchers(Store& store, const LaunchOptions& o, int nproc) {
  const std::string me = absl::StrCat(o.node_rank, "@pid", ::getpid());
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const std::string id = absl::StrCat(host, ":", me);
  const std::string claim_key = absl::StrCat("tinyddp/launch/node/", o.node_rank);
  auto owner = store.CompareSet(claim_key, {}, Bytes(id.begin(), id.end()));
  RETURN_IF_ERROR(owner);
  if (std::string(owner->begin(), owner->end()) != id) {
    return absl::FailedPreconditionError(absl::StrCat("two launchers claim --node_rank=", o.node_rank, " (the other is ",
                                                      std::string(owner->begin(), owner->end()),
                                                      "); give each machine its own node_rank"));
  }
  absl::Status s = store.Set(absl::StrCat("tinyddp/launch/nproc/", o.node_rank), std::to_string(nproc));
  RETURN_IF_ERROR(s);
  std::vector<std::string> keys;
  for (int n = 0; n < o.nnodes; ++n) keys.push_back(absl::StrCat("tinyddp/launch/nproc/", n));
  s = store.Wait(keys, std::chrono::seconds(o.rendezvous_timeout_seconds));
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat("not every node's launcher joined within ",
                                                    o.rendezvous_timeout_seconds, "s (", s.message(),
                                                    "); start `launch --node_rank=I` on each of the ", o.nnodes,
                                                    " machines with the same --master_addr/--master_port"));
  }
  RETURN_IF_ERROR(s);
  for (int n = 0; n < o.nnodes; ++n) {
    auto text = store.GetString(keys[n]);
    RETURN_IF_ERROR(text);
    if (*text != std::to_string(nproc)) {
      return absl::FailedPreconditionError(absl::StrCat("node ", n, " runs ", *text, " workers but node ", o.node_rank,
                                                        " runs ", nproc,
                                                        "; every node must use the same --nproc_per_node"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int rank, int world_size, int local_rank,
                                                                   int local_world_size, int group_rank,
                                                                   const std::string& master_addr,
                                                                   int master_port,
                                                                   const std::string& store_secret) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
      {"GROUP_RANK", std::to_string(group_rank)},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {kLauncherStoreEnv, "1"},
  };
  if (!store_secret.empty()) env.emplace_back(kStoreSecretEnv, store_secret);
  // Workers sharing a machine would each start one OpenMP/Eigen thread per core and fight over them.
  if (local_world_size > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

int RunLauncher(const LaunchOptions& o) {
  // Step 1: how many workers, and the store.
  auto nproc = ResolveNprocPerNode(o.nproc_per_node, cuda::DeviceCount(), UsableCpuCount());
  if (!nproc.ok()) {
    std::fprintf(stderr, "%s\n", std::string(nproc.status().message()).c_str());
    return 2;
  }
  const int world_size = o.nnodes * *nproc;
  int port = o.master_port >= 0 ? o.master_port : (o.nnodes == 1 ? 0 : 29500);
  // One node: the store listens on loopback only. Several: on the address the other nodes use.
  const std::string store_addr = o.nnodes == 1 ? "127.0.0.1" : o.master_addr;
  // The job secret (store_secret.h): the user's, which every node of a multi-node job must share, else
  // for one node a fresh one, handed to the workers in their environment.
  std::string secret = StoreSecretFromEnvironment();
  if (secret.empty() && o.nnodes == 1) {
    auto made = GenerateStoreSecret();
    if (!made.ok()) {
      Say(std::string(made.status().message()));
      return 2;
    }
    secret = *made;
  }
  if (secret.empty()) {
    Say(absl::StrCat("warning: ", kStoreSecretEnv, " is not set, so the job's store accepts any client that can "
                     "reach it; export the same secret on every node"));
  }
  std::unique_ptr<TCPStoreServer> server;
  if (o.node_rank == 0) {
    auto started = TCPStoreServer::Start({.host = store_addr, .port = port, .secret = secret});
    if (!started.ok()) {
      Say(absl::StrCat("could not host the rendezvous store: ", started.status().message()));
      return 2;
    }
    server = std::move(*started);
    port = server->port();
  }

  // Step 2: with several nodes, a store client of our own to meet the other launchers.
  std::unique_ptr<TCPStore> store;
  if (o.nnodes > 1) {
    auto client = TCPStore::Create({.host = server ? server->local_address() : o.master_addr,
                                    .port = port,
                                    .timeout = std::chrono::seconds(o.rendezvous_timeout_seconds),
                                    .secret = secret});
    absl::Status met = client.ok() ? MeetOtherLaunchers(**client, o, *nproc) : client.status();
    if (!met.ok()) {
      Say(absl::StrCat("node ", o.node_rank, " could not join the job: ", met.message()));
      return 2;
    }
    store = std::move(*client);
  }

  // Step 3: the workers. Each group's flight recorder writes its ring file into one directory.
  const JobFlightRecorder flight_recorder = JobFlightRecorder::ForThisJob();
  std::vector<WorkerProcessSpec> specs;
  for (int local = 0; local < *nproc; ++local) {
    const int rank = o.node_rank * *nproc + local;
    specs.push_back({rank, local, o.program,
                     WorkerEnvironment(rank, world_size, local, *nproc, o.node_rank, store_addr, port, secret)});
    for (auto& kv : flight_recorder.WorkerEnvironment()) specs.back().env.push_back(kv);
  }
  Say(absl::StrCat("node ", o.node_rank, "/", o.nnodes, ": starting ", *nproc, " worker(s), ranks ",
                   o.node_rank * *nproc, "-", (o.node_rank + 1) * *nproc - 1, " of ", world_size, "; store at ",
                   store_addr, ":", port, server ? absl::StrCat(" (listening on ", server->listening_on(), ")") : ""));
  Supervisor supervisor({.prefix_output = o.prefix_output, .grace = std::chrono::seconds(o.grace_seconds)});
  if (absl::Status s = supervisor.Start(specs); !s.ok()) {
    Say(std::string(s.message()));
    return 2;
  }

  // Step 4: another node's failure stops ours. The watcher polls the abort key once a second.
  std::atomic<bool> watching{true};
  std::thread watcher;
  if (store) {
    watcher = std::thread([&] {
      while (watching) {
        absl::Status s = store->Wait({kAbortKey}, std::chrono::seconds(1));
        if (absl::IsDeadlineExceeded(s)) continue;
        if (!watching) break;
        auto why = store->GetString(kAbortKey);
        supervisor.RequestStop(s.ok() ? absl::StrCat("another node failed: ", why.ok() ? *why : "?")
                                      : absl::StrCat("lost the job's store on node 0: ", s.message()));
        break;
      }
    });
  }
  JobResult result = supervisor.Wait();
  watching = false;
  if (watcher.joinable()) watcher.join();

  if (store) {
    if (result.first_failure) {
      (void)store->Set(kAbortKey, absl::StrCat("node ", o.node_rank, ": ", result.reason));
    }
    // Node 0's store must outlive every node's workers, so node 0 waits for all launchers to finish.
    auto finished = store->Add(kFinishedKey, 1);
    if (finished.ok() && *finished == o.nnodes) (void)store->Set(kAllFinishedKey, std::string("1"));
    if (o.node_rank == 0) {
      absl::Status all = store->Wait({kAllFinishedKey}, std::chrono::seconds(o.rendezvous_timeout_seconds));
      if (!all.ok()) Say(absl::StrCat("not every node reported back before closing the store: ", all.message()));
    }
  }
  flight_recorder.Report(result.exit_code != 0, "launch: ", o.nnodes);
  if (result.exit_code == 0) return 0;
  Say(absl::StrCat("job failed: ", result.reason, "; exiting with ", result.exit_code));
  return result.exit_code;
}

}  // namespace tinyddp::dist
