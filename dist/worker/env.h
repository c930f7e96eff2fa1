// WorkerEnv: where this process sits in a job, read from env:// (PyTorch's default init method), the
// variables every launcher sets for its workers (ours, torchrun, a PyTorchJob's pod):
//
//   RANK, WORLD_SIZE              this rank and the job's size
//   LOCAL_RANK, LOCAL_WORLD_SIZE  rank among the processes of this machine (picks cuda:LOCAL_RANK), and how many
//   GROUP_RANK                    index of this machine (optional: RANK / LOCAL_WORLD_SIZE)
//   MASTER_ADDR, MASTER_PORT      where rank 0's store listens
//
// RANK and WORLD_SIZE without LOCAL_*: one process per machine (local rank 0 of 1), as PyTorchJob and
// Volcano start a pod, unless MASTER_ADDR is a loopback address: only this machine can reach that store, so
// every rank is here (local rank RANK of WORLD_SIZE). Missing or inconsistent variables give one error that
// lists every problem and how to fix it. The worker's side only: launchers write these variables
// (dist/launch/workers.h); other engines' variables (Slurm, Open MPI, MPICH, Kubeflow) are translated into
// these by the programs that understand them, before they read them (docs/clusters.md says which).
// rendezvous.h turns a WorkerEnv into the job's TCPStore; InitProcessGroup into a process group.
#ifndef TINYDDP_DIST_WORKER_ENV_H_
#define TINYDDP_DIST_WORKER_ENV_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::dist {

/// Set (to "1") by a launcher that hosts the job's TCPStore server itself; rank 0 then connects as a plain
/// client instead of starting a server.
inline constexpr char kLauncherStoreEnv[] = "TINYDDP_LAUNCHER_STORE";

/// The round a worker belongs to: 0 for the first start, N after N restarts (torchrun's
/// TORCHELASTIC_RESTART_COUNT). A program that checkpoints resumes when it is above 0; InitProcessGroup
/// keeps each round's rendezvous keys apart in the job's store.
inline constexpr char kRestartCountEnv[] = "TINYDDP_RESTART_COUNT";

struct WorkerEnv {
  int rank = 0;              // global rank, 0 <= rank < world_size
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this machine: picks the GPU (cuda:local_rank)
  int local_world_size = 1;  // processes on this machine
  int group_rank = 0;        // index of this machine (node) in the job
  std::string master_addr;   // where the store server listens
  int master_port = 0;
  bool launcher_hosts_store = false;  // kLauncherStoreEnv was set: rank 0 must not start a server
  int restart_count = 0;              // kRestartCountEnv: 0 on the first start, N after N restarts
  std::string source = "env://";      // whose variables said it (a translating engine names itself)

  /// "rank 1/4 (local 1/2, node 0) store 127.0.0.1:29500 [env://]" for logs.
  std::string DebugString() const;
};

using EnvVars = std::map<std::string, std::string>;

/// The process's environment as a map (for ReadWorkerEnv(vars) and tests).
EnvVars CurrentEnvironment();

/// Reads the worker's identity from the env:// variables in `vars`. NotFound when neither RANK nor
/// WORLD_SIZE is set (with how to start a job); InvalidArgument listing every missing, malformed or
/// out-of-range variable, with the fix, otherwise.
absl::StatusOr<WorkerEnv> ReadWorkerEnv(const EnvVars& vars);
/// ReadWorkerEnv(CurrentEnvironment()).
absl::StatusOr<WorkerEnv> ReadWorkerEnv();
/// The part of ReadWorkerEnv that any reader of a launcher's workers shares (a translating engine's too):
/// kLauncherStoreEnv into launcher_hosts_store, kRestartCountEnv into restart_count. InvalidArgument for a
/// restart count that is not a number.
absl::Status ReadLauncherVariables(const EnvVars& vars, WorkerEnv& env);

/// True when a launcher started this process as one rank of a job: RANK or WORLD_SIZE is set.
bool IsWorker(const EnvVars& vars);
bool IsWorker();

/// TINYDDP_RESTART_COUNT of this process (0 when unset or not a number).
int RestartCount();

/// The store's address as sockets take it: "::1" for "[::1]", the way URLs (and torchrun's users) write an
/// IPv6 address; anything else unchanged.
std::string StoreHost(const std::string& master_addr);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_WORKER_ENV_H_
