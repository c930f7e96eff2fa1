// WorkerEnv: where this process sits in a job (rank, world size, rank on this machine, where rank 0's
// store listens), read from the variables of whichever engine started it. What each engine sets and
// what is read from it (docs/clusters.md has the whole table, with the sample job files):
//
//   engine                rank, world size          local rank, ranks here          store (MASTER_ADDR:PORT
//                                                                                   when set, else)
//   launch, torchrun      RANK, WORLD_SIZE          LOCAL_RANK, LOCAL_WORLD_SIZE    -
//   PyTorchJob, Volcano   RANK, WORLD_SIZE          0 of 1 (one process per pod)    PET_MASTER_ADDR:PORT
//   Kubeflow (PET_*)      PET_NODE_RANK, PET_NNODES 0 of 1 (PET_NPROC_PER_NODE=1)   PET_MASTER_ADDR:PORT
//   Slurm (srun)          SLURM_PROCID,             SLURM_LOCALID,                  first host of
//                         SLURM_STEP_NUM_TASKS      SLURM_STEP_TASKS_PER_NODE       SLURM_STEP_NODELIST :
//                                                                                   20000 + SLURM_JOB_ID % 20000
//   Open MPI (mpirun)     OMPI_COMM_WORLD_RANK,     OMPI_COMM_WORLD_LOCAL_RANK,     - (mpirun -x MASTER_ADDR
//                         OMPI_COMM_WORLD_SIZE      OMPI_COMM_WORLD_LOCAL_SIZE        -x MASTER_PORT)
//   MPICH, Intel MPI      PMI_RANK, PMI_SIZE        MPI_LOCALRANKID,                - (mpiexec -genv ...)
//   (Hydra)                                         MPI_LOCALNRANKS
//
// Which one: engines nest (sbatch runs mpirun, srun runs launch, a pod runs launch), and the innermost
// describes this process: the variables of a launcher that started it (launch sets TINYDDP_LAUNCHER_STORE,
// torchrun TORCHELASTIC_RUN_ID), else Open MPI's, MPICH's, a Slurm step's, Kubeflow's PET_*, and
// last RANK/WORLD_SIZE alone. A Slurm batch script itself (no srun step) is not a rank.
//
// Precedence: MASTER_ADDR/MASTER_PORT, when set, win over what the engine implies (launch's flags were
// turned into these variables by launch). RANK, WORLD_SIZE, LOCAL_RANK or LOCAL_WORLD_SIZE set beside
// an engine's own (exported in a job script) must agree with it: a contradiction is an error naming both
// variables and the fix, never a silent choice.
//
// RANK and WORLD_SIZE without LOCAL_*: one process per machine (local rank 0 of 1, node rank RANK), as
// PyTorchJob and Volcano start a pod, unless MASTER_ADDR is a loopback address: only this machine can
// reach that store, so every rank is here (local rank RANK of WORLD_SIZE).
//
// WorkerEnvironment writes the env:// set, for `launch` and SpawnWorkersIfNeeded to start workers with.
// Missing or inconsistent variables give one error that lists every problem and how to fix it.
// rendezvous.h turns a WorkerEnv into the job's TCPStore; InitProcessGroup into a process group.
#ifndef TINYDDP_DIST_LAUNCH_ENV_H_
#define TINYDDP_DIST_LAUNCH_ENV_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

enum class EnvSource { kEnvVars, kSlurm, kOpenMpi, kMpich, kKubeflow };
/// "env://", "Slurm", "Open MPI", "MPICH (Hydra)", "Kubeflow (PET_*)".
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

/// Reads the worker's identity from `vars` (see the header comment for which variables). Under Slurm
/// without MASTER_ADDR this resolves the first host of the node list (getaddrinfo); when that fails it
/// says so on stderr (local rank 0 only) and uses SLURM_LAUNCH_NODE_IPADDR. Errors: NotFound when no
/// engine's variables are present at all; InvalidArgument listing every missing, malformed or
/// contradicting variable, with the fix, otherwise.
absl::StatusOr<WorkerEnv> ReadWorkerEnv(const EnvVars& vars);
/// ReadWorkerEnv(CurrentEnvironment()).
absl::StatusOr<WorkerEnv> ReadWorkerEnv();

/// True when an engine started this process as one rank of a job: RANK or WORLD_SIZE, a Slurm step's
/// SLURM_PROCID (not the batch script's), OMPI_COMM_WORLD_RANK, PMI_RANK, or PET_NODE_RANK/PET_NNODES.
bool IsWorker(const EnvVars& vars);
bool IsWorker();

/// TINYDDP_RESTART_COUNT of this process (0 when unset or not a number).
int RestartCount();

/// The store's address as sockets take it: "::1" for "[::1]", the way URLs (and torchrun's users) write an
/// IPv6 address; anything else unchanged.
std::string StoreHost(const std::string& master_addr);

/// The hosts of a Slurm host list, in order: "gpu[01-04,07]" -> gpu01 gpu02 gpu03 gpu04 gpu07;
/// "a-[1-2],b3" -> a-1 a-2 b3; "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2 (what `scontrol show hostnames`
/// prints). A range keeps the zero padding of its first number. InvalidArgument for unbalanced
/// brackets, a range that is not N or N-M with N <= M, or more than 1,048,576 hosts.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view hostlist);

/// The env:// variables of one worker a launcher starts, with TINYDDP_RESTART_COUNT, and
/// TINYDDP_STORE_SECRET when `store_secret` is not empty.
std::vector<std::pair<std::string, std::string>> WorkerEnvironment(
    int rank, int world_size, int local_rank, int local_world_size, int group_rank, const std::string& master_addr,
    int master_port, const std::string& store_secret = "", int restart_count = 0);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_ENV_H_
