// SpawnWorkersIfNeeded: lets a program start its own workers, so that
//
//   ./bazelw run //examples:ddp_minimal        # one rank per GPU, or 2 CPU ranks
//
// needs no launcher. Called first thing in main(): in a process that is already a worker (RANK or
// WORLD_SIZE is set: dist/worker/env.h) it returns at once; otherwise the process becomes a small launcher
// for its own binary: it hosts the job's store on a free loopback port, re-executes /proc/self/exe with the
// same arguments once per rank (with RANK, WORLD_SIZE, ... set: workers.h), supervises them (supervisor.h:
// signals forwarded, all stopped on the first failure, which is named) and exits with the job's status.
// Works the same inside and outside Bazel. The plain way: one round, no restart; a program that wants
// restarts, worker limits and job observers opts into the elastic wing's spawn (docs/design.md), built
// from the pieces below.
#ifndef TINYDDP_DIST_LAUNCH_SPAWN_H_
#define TINYDDP_DIST_LAUNCH_SPAWN_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/launch/supervisor.h"
#include "dist/launch/workers.h"
#include "dist/store/tcp_store_server.h"

namespace tinyddp::dist {

struct SpawnOptions {
  /// Workers to start: 0 = one per visible GPU, or `cpu_ranks` when there is none. The environment
  /// variable TINYDDP_NPROC (a number, or gpu/cpu/auto as in launch) overrides it.
  int nproc = 0;
  int cpu_ranks = 2;
};

/// The most workers one program starts on one machine by itself; more is a typo (TINYDDP_NPROC=100000).
inline constexpr int kMaxSpawnedWorkers = 1024;

/// Returns OK in a worker. In the starting process, runs the job and calls std::exit() with its status
/// (0, or the failing rank's exit code / 128 + signal), so it returns only with an error when the
/// workers could not be started at all: InvalidArgument for a bad TINYDDP_NPROC, ResourceExhausted for
/// more than kMaxSpawnedWorkers. Precondition: argv is main()'s, unmodified; call it before starting
/// threads (workers are tied to the calling thread's lifetime by PR_SET_PDEATHSIG).
absl::Status SpawnWorkersIfNeeded(int argc, char** argv, const SpawnOptions& options = {});

// ---- The pieces, for a program's own way of spawning (restarts, limits) --------------------------------

/// How many workers, and why: TINYDDP_NPROC, else options.nproc, else one per GPU or the CPU ranks.
struct SpawnCount {
  int nproc = 0;
  int gpus = 0;
  std::string why;   // "one per GPU", "CPU ranks", "as the program asks", "TINYDDP_NPROC=4" (for messages)
  std::string what;  // as the user wrote it ("--nproc=3", "TINYDDP_NPROC=4"), "" when nobody asked
};
absl::StatusOr<SpawnCount> CountSpawnWorkers(const SpawnOptions& options);

/// A job of this program's own workers: the store it hosts, and who they are.
struct SpawnedJob {
  std::unique_ptr<TCPStoreServer> store;  // on 127.0.0.1, a free port, admitting only the job's secret
  WorkerGroup workers;                    // /proc/self/exe with this process's arguments, `count.nproc` times
  std::string program;                    // its name, for messages
};
absl::StatusOr<SpawnedJob> StartSpawnedJob(int argc, char** argv, int nproc);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_SPAWN_H_
