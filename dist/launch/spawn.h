// SpawnWorkersIfNeeded: lets a training program start its own workers, so that
//
//   ./bazelw run //examples:ddp_mlp        # one rank per GPU, or 2 CPU ranks
//
// needs no launcher. Called first thing in main(): in a process that is already a worker (RANK, Slurm or
// Open MPI variables are set) it returns at once; otherwise the process becomes a small launcher for its
// own binary: it hosts the job's store on a free port, re-executes /proc/self/exe with the same
// arguments once per rank (with RANK, WORLD_SIZE, ... set), supervises them as `launch` does
// (supervisor.h, with the observers it is given) and exits with the job's status. Works the same inside
// and outside Bazel. Like launch, it refuses more workers than the machine can hold (worker_limits.h) and,
// with max_restarts, starts them all again after a failure (TINYDDP_RESTART_COUNT tells them their round).
#ifndef TINYDDP_DIST_LAUNCH_SPAWN_H_
#define TINYDDP_DIST_LAUNCH_SPAWN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/launch/job_observer.h"

namespace tinyddp::dist {

struct SpawnOptions {
  /// Workers to start: 0 = one per visible GPU, or `cpu_ranks` when there is none. The environment
  /// variable TINYDDP_NPROC (a number, or gpu/cpu/auto as in launch) overrides it.
  int nproc = 0;
  int cpu_ranks = 2;
  int max_restarts = 0;        // after a failed round (not a permanent failure: exit 73), start again this often
  bool one_gpu_each = false;   // the workers use NCCL: refuse more of them than there are GPUs
  bool ignore_worker_limits = false;  // skip the worker_limits.h check (the program's override flag)
  /// How the program spells its worker-count flag and its override flag, for the refusal message
  /// ("" = none offered).
  std::string nproc_flag = "--nproc";
  std::string override_flag = "--ignore_worker_limits";
  /// Told about each round of workers (job_observer.h); none: the plain job, whose failure is the first
  /// one seen. ddp_mlp passes the root-cause blame and the flight recorder's verdict (dist/observe/).
  std::vector<std::shared_ptr<JobObserver>> job_observers;
};

/// Returns OK in a worker. In the starting process, runs the job and calls std::exit() with its status
/// (0, or the failing rank's exit code / 128 + signal), so it returns only with an error when the
/// workers could not be started at all: ResourceExhausted when the machine cannot hold them,
/// InvalidArgument for a bad TINYDDP_NPROC. Precondition: argv is main()'s, unmodified; call it before
/// starting threads (workers are tied to the calling thread's lifetime by PR_SET_PDEATHSIG).
absl::Status SpawnWorkersIfNeeded(int argc, char** argv, const SpawnOptions& options = {});

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_SPAWN_H_
