// RunLauncher: see launcher.h. Keys the launchers share live under "tinyddp/launch/" in the job's
// store, apart from anything the workers write; those of one round of an elastic job under
// "tinyddp/launch/round/<r>/".
#include "dist/elastic/launcher.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "dist/elastic/job_observer.h"
#include "dist/elastic/job_settings.h"
#include "dist/elastic/known_variables.h"
#include "dist/elastic/lifeline.h"
#include "dist/elastic/rounds.h"
#include "dist/elastic/worker_limits.h"
#include "dist/elastic/worker_output.h"
#include "dist/launch/supervisor.h"
#include "dist/launch/workers.h"
#include "dist/store/store_secret.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_server.h"
#include "dist/worker/job_timeout.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {
namespace {

// One round's keys: "abort" (a node's failure, which stops the others), "failed"/"interrupted"/"permanent"
// (counts of nodes), "finished" (count), "verdict" (set by the last node to finish), "read" / "all_read".
std::string RoundKey(int round, const char* what) { return absl::StrCat("tinyddp/launch/round/", round, "/", what); }

void Say(const std::string& line) { std::fprintf(stderr, "launch: %s\n", line.c_str()); }

std::chrono::milliseconds RendezvousTimeout(const LaunchOptions& o) {
  if (o.rendezvous_timeout_seconds <= 0) return o.timeout;
  return std::chrono::seconds(o.rendezvous_timeout_seconds);
}

// How one round went on every node (for one node: here).
struct RoundVerdict {
  int failed_nodes = 0;
  int interrupted_nodes = 0;  // a signal stopped them: no restart
  int permanent_nodes = 0;    // their first failure exited with kPermanentFailureExitCode: no restart
  std::string cause;          // the job's root cause, "node N: rank R ... failed first: ..." ("" when none failed)
};

// A node's cause for the round, as stored: "<order> <time_us> <text>". The order is JobResult's
// cause_order (with blame attached: 0 an own failure, 1 a timeout, 2 a reaction to another's failure), 3
// none; the lowest order wins across nodes, then the earliest time (the machines' clocks need only agree
// to within the time failures take to spread).
struct Cause {
  int order = 3;
  int64_t time_us = 0;
  std::string text;
  std::string Record() const { return absl::StrCat(order, " ", time_us, " ", text); }
  bool Before(const Cause& other) const {
    return order < other.order || (order == other.order && time_us < other.time_us);
  }
};

Cause LocalCause(const LaunchOptions& o, const JobResult& r) {
  Cause c;
  if (r.cause_order) {
    c.order = *r.cause_order;
    c.time_us = r.cause_time_us;
  }
  if (r.exit_code != 0) c.text = absl::StrCat("node ", o.node_rank, ": ", r.reason);
  return c;
}

Cause ParseCause(const std::string& record) {
  std::vector<std::string> parts = absl::StrSplit(record, absl::MaxSplits(' ', 2));
  Cause c;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &c.order) || !absl::SimpleAtoi(parts[1], &c.time_us)) return {};
  if (parts.size() == 3) c.text = parts[2];
  return c;
}

// Several nodes: after this node's workers are done, publish how they ended and learn how the round went
// everywhere. Every node reaches the same verdict, so all restart or all stop, and all name the same
// cause. Node 0 hosts the store, so before it may close it, every node must have read the verdict.
// After a failure here the other nodes were told through the abort key (their watchers poll it every
// second and stop their workers, SIGKILL after --grace_seconds), so the wait for their reports is that
// long, not the whole timeout: a node that cannot report by then is unreachable.
absl::StatusOr<RoundVerdict> AgreeOnRound(Store& store, const LaunchOptions& o, int round, const JobResult& local) {
  const std::chrono::milliseconds timeout =
      local.exit_code == 0 ? RendezvousTimeout(o)
                           : std::min<std::chrono::milliseconds>(RendezvousTimeout(o),
                                                                 std::chrono::seconds(o.grace_seconds + 5));
  constexpr const char* kCounts[] = {"failed", "interrupted", "permanent"};
  const bool mine[] = {local.exit_code != 0, local.interrupted, local.permanent};
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(store.Add(RoundKey(round, kCounts[i]), mine[i] ? 1 : 0).status());
  RETURN_IF_ERROR(store.Set(absl::StrCat(RoundKey(round, "cause/"), o.node_rank), LocalCause(o, local).Record()));
  ASSIGN_OR_RETURN(const int64_t finished, store.Add(RoundKey(round, "finished"), 1));
  if (finished == o.nnodes) {  // the last node to finish: every node's keys are written
    std::string counts;
    for (const char* what : kCounts) {
      ASSIGN_OR_RETURN(const int64_t count, store.Add(RoundKey(round, what), 0));
      absl::StrAppend(&counts, count, " ");
    }
    Cause best;
    for (int n = 0; n < o.nnodes; ++n) {
      ASSIGN_OR_RETURN(const std::string record, store.GetString(absl::StrCat(RoundKey(round, "cause/"), n)));
      const Cause cause = ParseCause(record);
      if (!cause.text.empty() && (best.text.empty() || cause.Before(best))) best = cause;
    }
    RETURN_IF_ERROR(store.Set(RoundKey(round, "verdict"), absl::StrCat(counts, "\n", best.text)));
  }
  absl::Status waited = store.Wait({RoundKey(round, "verdict")}, timeout);
  if (!waited.ok()) {
    return absl::Status(waited.code(), absl::StrCat("not every node's launcher reported the end of its workers within ",
                                                    FormatTimeout(timeout), ": ", waited.message()));
  }
  ASSIGN_OR_RETURN(const std::string text, store.GetString(RoundKey(round, "verdict")));
  // "<failed> <interrupted> <permanent> \n<the cause>"
  std::pair<std::string, std::string> lines = absl::StrSplit(text, absl::MaxSplits('\n', 1));
  std::vector<std::string> counts = absl::StrSplit(lines.first, ' ', absl::SkipEmpty());
  RoundVerdict verdict;
  if (counts.size() != 3 || !absl::SimpleAtoi(counts[0], &verdict.failed_nodes) ||
      !absl::SimpleAtoi(counts[1], &verdict.interrupted_nodes) ||
      !absl::SimpleAtoi(counts[2], &verdict.permanent_nodes)) {
    return absl::InternalError(absl::StrCat("garbled round verdict \"", text, "\" in the job's store"));
  }
  verdict.cause = lines.second;
  // Node 0 hosts the store and leaves once every node's read is counted, which can be before the reply to
  // this node's last call arrives: with the verdict in hand, a store lost here ends nothing.
  auto lost_at_the_end = [&](const absl::Status& s) { return o.node_rank != 0 && absl::IsUnavailable(s); };
  absl::StatusOr<int64_t> read = store.Add(RoundKey(round, "read"), 1);
  if (!read.ok()) return lost_at_the_end(read.status()) ? absl::StatusOr<RoundVerdict>(verdict) : read.status();
  if (*read == o.nnodes) {
    absl::Status all = store.Set(RoundKey(round, "all_read"), std::string("1"));
    if (!all.ok() && !lost_at_the_end(all)) return all;
  }
  if (o.node_rank == 0) {
    absl::Status all = store.Wait({RoundKey(round, "all_read")}, timeout);
    if (!all.ok()) {
      Say(absl::StrCat("not every node read the round's outcome before the store closes: ", all.message()));
    }
  }
  return verdict;
}

// Runs one round of the workers on this node and waits for them. With several nodes, a watcher stops
// them when another node reports a failure of this round.
// `store_lost`: set when the watcher lost the store (node 0 is gone or unreachable); the workers were
// stopped for it, and nothing more can be agreed on.
JobResult RunRound(const LaunchOptions& o, int round, std::vector<WorkerProcessSpec> specs, Store* store,
                   const std::vector<JobObserver*>& observers, Lifeline& lifeline, bool* store_lost) {
  SupervisorOptions options{.grace = std::chrono::seconds(o.grace_seconds),
                            .preempt_grace = std::chrono::seconds(o.preempt_grace_seconds)};
  AttachObservers(observers, round, specs, options);
  Supervisor supervisor(std::move(options));
  PrefixedOutput output;  // --prefix_output: the workers write into its pipes (worker_output.h)
  absl::Status started = o.prefix_output ? output.Attach(specs) : absl::OkStatus();
  if (started.ok()) started = supervisor.Start(specs);
  if (!started.ok()) {
    Say(std::string(started.message()));
    JobResult failed;
    failed.exit_code = 2;
    failed.reason = std::string(started.message());
    failed.interrupted = true;  // cannot start: restarting would fail the same way
    return failed;
  }
  if (o.prefix_output) output.Start();
  lifeline.Watch(supervisor.pids());
  std::atomic<bool> watching{true};
  std::atomic<bool> lost{false};
  std::thread watcher;
  if (store != nullptr) {
    watcher = std::thread([&] {
      const std::string abort_key = RoundKey(round, "abort");
      while (watching) {
        const auto asked = std::chrono::steady_clock::now();
        absl::Status s = store->Wait({abort_key}, std::chrono::seconds(1));
        // The server answers a 1 s wait after about 1 s ("not yet"); no answer for much longer means the
        // connection to node 0 is gone (a cut link, a dead host).
        const bool unanswered = std::chrono::steady_clock::now() - asked > std::chrono::seconds(8);
        if (absl::IsDeadlineExceeded(s) && !unanswered) continue;
        if (!s.ok()) {
          lost = true;  // also when the workers ended meanwhile: the round's end cannot be reported either
          if (watching) supervisor.RequestStop(absl::StrCat("lost the job's store on node 0: ", s.message()));
          break;
        }
        if (!watching) break;
        auto why = store->GetString(abort_key);
        supervisor.RequestStop(absl::StrCat("another node failed: ", why.ok() ? *why : "?"));
        break;
      }
    });
  }
  JobResult result = supervisor.Wait();
  output.Finish();  // the workers' last lines before anything is said about the round
  JudgeRound(observers, result);
  watching = false;
  if (watcher.joinable()) watcher.join();
  if (store != nullptr && result.exit_code != 0 && !lost) {
    // A failed call here (node 0 unreachable) takes seconds, not the timeout: see RunLauncher.
    lost = !store->Set(RoundKey(round, "abort"), absl::StrCat("node ", o.node_rank, ": ", result.reason)).ok();
  }
  *store_lost = lost;
  return result;
}

}  // namespace

int RunLauncher(const LaunchOptions& o, const std::vector<JobObserver*>& observers) {
  Lifeline lifeline;  // first, before any thread: no process started below outlives this one (lifeline.h)
  WarnAboutUnknownVariables("launch: ");
  // Step 1: how many workers (and whether this machine can hold them), and the store.
  auto nproc = ResolveNprocPerNode(o.nproc_per_node, cuda::DeviceCount(), UsableCpuCount());
  if (!nproc.ok()) {
    std::fprintf(stderr, "%s\n", std::string(nproc.status().message()).c_str());
    return 2;
  }
  if (!o.ignore_worker_limits) {
    absl::Status fits = CheckWorkerCount(*nproc, ReadMachineCapacity(), /*one_gpu_each=*/false, 0,
                                         absl::StrCat("--nproc_per_node=", o.nproc_per_node), "--ignore_worker_limits");
    if (!fits.ok()) {
      Say(std::string(fits.message()));
      return 2;
    }
  }
  const int world_size = o.nnodes * *nproc;
  int port = o.master_port >= 0 ? o.master_port : (o.nnodes == 1 ? 0 : 29500);
  // One node: the store listens on loopback only. Several: on the address the other nodes use.
  const std::string store_addr = o.nnodes == 1 ? "127.0.0.1" : o.master_addr;
  // The job secret (store_secret.h): the user's, which every node of a multi-node job must share (without
  // one it refuses, saying how to make one), else for one node a fresh one, handed to the workers.
  const absl::StatusOr<std::string> job_secret = JobStoreSecret(o.nnodes, StoreSecretFromEnvironment());
  if (!job_secret.ok()) {
    Say(std::string(job_secret.status().message()));
    return 2;
  }
  const std::string& secret = *job_secret;
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
                                    .timeout = RendezvousTimeout(o),
                                    .secret = secret});
    absl::Status met = client.ok() ? MeetOtherLaunchers(**client, o, *nproc, RendezvousTimeout(o)) : client.status();
    if (!met.ok()) {
      Say(absl::StrCat("node ", o.node_rank, " could not join the job: ", met.message()));
      return 2;
    }
    store = std::move(*client);
    // From here on each wait states its own bound, and an answer that has not come 10 s after it means
    // node 0 is unreachable (tcp_store.h): after a local failure that is seconds, not --timeout.
    store->set_timeout(std::chrono::seconds(1));
  }

  // Step 3: the workers, in rounds: a failed round is followed by a new one while --max_restarts allows.
  Say(absl::StrCat("node ", o.node_rank, "/", o.nnodes, ": starting ", *nproc, " worker(s), ranks ",
                   o.node_rank * *nproc, "-", (o.node_rank + 1) * *nproc - 1, " of ", world_size, "; store at ",
                   store_addr, ":", port, server ? absl::StrCat(" (listening on ", server->listening_on(), ")") : "",
                   "; timeout ", FormatTimeout(o.timeout), " (", o.timeout_source, ")",
                   o.max_restarts > 0 ? absl::StrCat(", up to ", o.max_restarts, " restart(s)") : ""));
  const WorkerGroup workers{.argv = o.program,
                            .nproc = *nproc,
                            .world_size = world_size,
                            .node_rank = o.node_rank,
                            .master_addr = store_addr,
                            .master_port = port,
                            .store_secret = secret,
                            .extra_env = {{kTimeoutEnv, FormatTimeout(o.timeout)}}};  // one timeout for the job
  return RunRounds("launch", o.max_restarts, [&](int round) {
    const std::vector<WorkerProcessSpec> specs = WorkerSpecs(workers, round);
    bool store_lost = false;
    const JobResult result = RunRound(o, round, specs, store.get(), observers, lifeline, &store_lost);
    lifeline.EndRound();
    // A preemption (the workers checkpointed on a signal and exited with 75) is no failure to explain.
    const bool preempted = result.exit_code == kPreemptedExitCode && result.interrupted;
    if (result.exit_code != 0 && !preempted) {
      std::vector<int> ranks_here;
      for (const WorkerProcessSpec& spec : specs) ranks_here.push_back(spec.rank);
      for (JobObserver* observer : observers) observer->FailedRound(round, "launch: ", ranks_here);
    }
    for (JobObserver* observer : observers) observer->Finish(result.exit_code == 0 || preempted);

    // Step 4: how the round went everywhere (several nodes agree on it); rounds.h decides what follows.
    RoundVerdict verdict{result.exit_code != 0, result.interrupted, result.permanent, result.reason};
    const int code = result.exit_code != 0 ? result.exit_code : 1;
    // With a local failure, that is the reason given when the other nodes cannot be reached.
    const std::string here = result.exit_code != 0 ? absl::StrCat("job failed: ", result.reason, "; ") : "";
    if (store_lost) {  // no verdict to agree on, no rendezvous for another round
      Say(absl::StrCat(here, "node ", o.node_rank, " cannot reach the job's store on node 0; exiting with ", code));
      return RoundEnd{.exit_code = code, .said = true};
    }
    if (store) {
      absl::StatusOr<RoundVerdict> agreed = AgreeOnRound(*store, o, round, result);
      if (!agreed.ok()) {
        Say(absl::StrCat(here, "node ", o.node_rank, ": ", agreed.status().message(), "; exiting with ", code));
        return RoundEnd{.exit_code = code, .said = true};
      }
      verdict = *agreed;
    }
    if (verdict.failed_nodes == 0) return RoundEnd{};
    return RoundEnd{.exit_code = code,
                    .why = !verdict.cause.empty() ? verdict.cause : "a worker on another node failed",
                    .preempted = preempted,
                    .interrupted = verdict.interrupted_nodes > 0,
                    .permanent = verdict.permanent_nodes > 0};
  });
}

}  // namespace tinyddp::dist
