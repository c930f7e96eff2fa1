// The cluster engines' contracts (a wing): where this process sits in a job when Slurm, Open MPI,
// MPICH/Hydra or Kubeflow started it, read from their own variables and translated into env://
// (dist/worker/env.h), which is all the core reads. Programs that understand the engines call
// UseClusterEngine() first thing in main() (ddp_mlp; the launch program reads Kubeflow's PET_* flags,
// pet_flags.h); the others understand env:// only (docs/clusters.md has the table). What each engine sets
// and what is read from it:
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
// Plain env:// (RANK or WORLD_SIZE, no PET_*: our launcher's workers, torchrun's, ranks started by hand)
// needs no translation: the core's ReadWorkerEnv reads it, as it reads what this wing writes. For the
// engines' own variables, the core's rules carry over: without a local rank, one process per machine
// unless the store is on loopback; missing or inconsistent variables give one error that lists every
// problem (in the engine's names) and how to fix it; the launcher's variables are read as the core reads
// them (ReadLauncherVariables).
#ifndef TINYDDP_DIST_ENGINES_ENGINES_H_
#define TINYDDP_DIST_ENGINES_ENGINES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

enum class EnvSource { kEnvVars, kSlurm, kOpenMpi, kMpich, kKubeflow };
/// "env://", "Slurm", "Open MPI", "MPICH (Hydra)", "Kubeflow (PET_*)".
const char* EnvSourceName(EnvSource source);

/// Reads the worker's identity from `vars` through whichever engine's variables describe this process (see
/// the header comment); `source` of the result names the engine. Under Slurm without MASTER_ADDR this
/// resolves the first host of the node list (getaddrinfo); when that fails it says so on stderr (local rank
/// 0 only) and uses SLURM_LAUNCH_NODE_IPADDR. Errors: NotFound when no engine's variables are present at
/// all; InvalidArgument listing every missing, malformed or contradicting variable, with the fix, otherwise.
absl::StatusOr<WorkerEnv> ReadEngineEnv(const EnvVars& vars);

/// True when an engine started this process as one rank of a job: RANK or WORLD_SIZE, a Slurm step's
/// SLURM_PROCID (not the batch script's), OMPI_COMM_WORLD_RANK, PMI_RANK, or PET_NODE_RANK/PET_NNODES.
bool IsEngineRank(const EnvVars& vars);

/// The env:// variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
/// MASTER_PORT) that say what `env` says.
std::vector<std::pair<std::string, std::string>> EnvVarsOf(const WorkerEnv& env);

/// The seam: call first thing in main(). In a process that Slurm, Open MPI, MPICH or Kubeflow started as a
/// rank (and no launcher of ours), reads its place (ReadEngineEnv) and sets the env:// variables, so that
/// InitProcessGroup and SpawnWorkersIfNeeded see a rank; returns the engine's name ("env://" when there was
/// nothing to translate). Errors: ReadEngineEnv's, with nothing set.
absl::StatusOr<std::string> UseClusterEngine();

/// The hosts of a Slurm host list, in order: "gpu[01-04,07]" -> gpu01 gpu02 gpu03 gpu04 gpu07;
/// "a-[1-2],b3" -> a-1 a-2 b3; "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2 (what `scontrol show hostnames`
/// prints). A range keeps the zero padding of its first number. InvalidArgument for unbalanced
/// brackets, a range that is not N or N-M with N <= M, or more than 1,048,576 hosts.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view hostlist);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ENGINES_ENGINES_H_
