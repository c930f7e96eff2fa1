// LaunchOptions: what `launch` (torchrun's interface for C++ programs) is told, as the launcher and
// spawn use it. launch_flags.h reads it from the command line:
//
//   launch [--nproc_per_node=N|gpu|cpu|auto] [--nnodes=K --node_rank=I --master_addr=H --master_port=P]
//          [--prefix_output|--tee=3] [--grace_seconds=S] [--timeout=T] [--max_restarts=N]
//          [--ignore_worker_limits] [--check] PROGRAM [ARGS...]
#ifndef TINYDDP_DIST_LAUNCH_LAUNCH_OPTIONS_H_
#define TINYDDP_DIST_LAUNCH_LAUNCH_OPTIONS_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tinyddp::dist {

struct LaunchOptions {
  // --nproc_per_node: a number, or "gpu" (one per visible GPU), "cpu" (one per CPU core this process may
  // use), "auto" (gpu if any GPU is visible, else cpu). These are torchrun's meanings. Default 1.
  std::string nproc_per_node = "1";
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // -1 = default: with one node, a free port picked by the launcher; with several, 29500.
  int master_port = -1;
  bool prefix_output = false;  // --prefix_output, or torchrun's --tee (which also prefixes lines)
  int grace_seconds = 5;       // SIGTERM to SIGKILL when stopping workers
  // The job's one timeout (job_timeout.h), bounding every wait of the launcher and, as TINYDDP_TIMEOUT, of
  // its workers: launch's --timeout, else the program's own --timeout (so that both wait alike), else
  // TINYDDP_TIMEOUT, else 300 s. `timeout_source` says which, for the launcher's first line.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  std::string timeout_source = "the default";
  int rendezvous_timeout_seconds = 0;  // how long launchers of a multi-node job wait for each other; 0: timeout
  int max_restarts = 0;                // --max_restarts: restart every worker this often after a failure
  bool ignore_worker_limits = false;   // skip the check that the workers fit on this machine (worker_limits.h)
  bool check = false;          // --check: print the GPU/driver/NCCL report and exit
  bool help = false;
  std::vector<std::string> program;  // PROGRAM and its arguments
};

/// Resolves --nproc_per_node to a count, given how many GPUs and CPU cores this machine offers.
/// InvalidArgument for "gpu" without a GPU, or a count below 1.
absl::StatusOr<int> ResolveNprocPerNode(const std::string& spec, int gpu_count, int cpu_count);

/// CPU cores this process may run on (its affinity mask; honours taskset and cgroup cpusets).
int UsableCpuCount();

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_LAUNCH_OPTIONS_H_
