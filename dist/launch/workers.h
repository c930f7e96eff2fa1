// The core launcher's one job: start one machine's workers with their env:// variables and watch them
// (supervisor.h), as torchrun does. The launch program (round after round, node beside node) and
// SpawnWorkersIfNeeded (spawn.h) both build their workers here, so a worker started either way reads the
// same variables (dist/worker/env.h is the reading side).
#ifndef TINYDDP_DIST_LAUNCH_WORKERS_H_
#define TINYDDP_DIST_LAUNCH_WORKERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/launch/supervisor.h"

namespace tinyddp::dist {

/// Resolves a worker count as torchrun's --nproc_per_node does: a number, "gpu" (one per visible GPU), "cpu"
/// (one per CPU core this process may use), "auto" (gpu if any GPU is visible, else cpu). InvalidArgument
/// for "gpu" without a GPU, or a count below 1.
absl::StatusOr<int> ResolveNprocPerNode(const std::string& spec, int gpu_count, int cpu_count);

/// CPU cores this process may run on (its affinity mask; honours taskset and cgroup cpusets).
int UsableCpuCount();

/// The env:// variables of one worker a launcher starts, with TINYDDP_RESTART_COUNT, and
/// TINYDDP_STORE_SECRET when `store_secret` is not empty.
std::vector<std::pair<std::string, std::string>> WorkerEnvironment(
    int rank, int world_size, int local_rank, int local_world_size, int group_rank, const std::string& master_addr,
    int master_port, const std::string& store_secret = "", int restart_count = 0);

/// One machine's workers: ranks node_rank * nproc ... + nproc - 1 of world_size, each running `argv`.
struct WorkerGroup {
  std::vector<std::string> argv;  // argv[0] is the program: a path, or a name looked up in PATH
  int nproc = 1;
  int world_size = 1;
  int node_rank = 0;
  std::string master_addr;  // the job's store
  int master_port = 0;
  std::string store_secret;
  std::vector<std::pair<std::string, std::string>> extra_env;  // e.g. the job's TINYDDP_TIMEOUT
};

/// The Supervisor's specs for `group`'s workers in round `round` (0 unless something restarts them).
std::vector<WorkerProcessSpec> WorkerSpecs(const WorkerGroup& group, int round = 0);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_WORKERS_H_
