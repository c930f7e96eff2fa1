// WorkerEnv: where this process sits in a job (rank, world size, rank on this machine, where rank 0's
// store listens), read from whichever launcher started it:
//
//   env://    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT
//             (set by our `launch`, by torchrun, or by hand)
//   Slurm     SLURM_PROCID, SLURM_STEP_NUM_TASKS|SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//             SLURM_STEP_TASKS_PER_NODE|SLURM_NTASKS_PER_NODE|SLURM_TASKS_PER_NODE; master from MASTER_ADDR
//             else SLURM_LAUNCH_NODE_IPADDR, port from MASTER_PORT else 20000 + SLURM_JOB_ID % 20000
//   Open MPI  OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, plus MASTER_ADDR and MASTER_PORT
//             (mpirun -x MASTER_ADDR=host-of-rank-0 -x MASTER_PORT=29500)
//
// The first set present wins, in that order, so `srun launch ...` workers read launch's variables.
// Missing or inconsistent variables give one error that lists every problem and how to fix it.
// rendezvous.h turns a WorkerEnv into the job's TCPStore; InitProcessGroup into a process group.
#ifndef TINYDDP_DIST_LAUNCH_ENV_H_
#define TINYDDP_DIST_LAUNCH_ENV_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::dist {

enum class EnvSource { kEnvVars, kSlurm, kOpenMpi };
/// "env://", "Slurm", "Open MPI".
const char* EnvSourceName(EnvSource source);

/// Set (to "1") by `launch` and by SpawnWorkersIfNeeded when they host the job's TCPStore server
/// themselves; rank 0 then connects as a plain client instead of starting a server.
inline constexpr char kLauncherStoreEnv[] = "TINYDDP_LAUNCHER_STORE";

/// Set by `launch --max_restarts` and self-launching programs to the round a worker belongs to: 0 for
/// the first start, 1 after the first restart, ... (torchrun's TORCHELASTIC_RESTART_COUNT). A program
/// that checkpoints resumes from its last good checkpoint when it is above 0; InitProcessGroup keeps
/// each round's rendezvous keys apart in the job's store.
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
  EnvSource source = EnvSource::kEnvVars;

  /// "rank 1/4 (local 1/2, node 0) store 127.0.0.1:29500 [env://]" for logs.
  std::string DebugString() const;
};

using EnvVars = std::map<std::string, std::string>;

/// The process's environment as a map (for ReadWorkerEnv(vars) and tests).
EnvVars CurrentEnvironment();

/// Reads the worker's identity from `vars` (see the header comment for which variables). Errors:
/// NotFound when no set of variables is present at all; InvalidArgument listing every missing or
/// inconsistent variable, with the fix, otherwise.
absl::StatusOr<WorkerEnv> ReadWorkerEnv(const EnvVars& vars);
/// ReadWorkerEnv(CurrentEnvironment()).
absl::StatusOr<WorkerEnv> ReadWorkerEnv();

/// True when a launcher started this process as one rank of a job: RANK or WORLD_SIZE, or Slurm's
/// SLURM_PROCID with a task count, or OMPI_COMM_WORLD_RANK is present.
bool IsWorker(const EnvVars& vars);
bool IsWorker();

/// TINYDDP_RESTART_COUNT of this process (0 when unset or not a number).
int RestartCount();

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_ENV_H_
