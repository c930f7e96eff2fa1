// One machine's workers: see workers.h.
#include "dist/launch/workers.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/store/store_secret.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

absl::StatusOr<int> ResolveNprocPerNode(const std::string& spec, int gpu_count, int cpu_count) {
  if (spec == "gpu" && gpu_count == 0) {
    return absl::InvalidArgumentError(
        "launch: --nproc_per_node=gpu, but no GPU is visible (no driver or device, CUDA_VISIBLE_DEVICES empty, "
        "or a CPU-only build); use --nproc_per_node=cpu, auto, or a number");
  }
  if (spec == "gpu") return gpu_count;
  if (spec == "cpu") return cpu_count;
  if (spec == "auto") return gpu_count > 0 ? gpu_count : cpu_count;
  int n = 0;
  if (!absl::SimpleAtoi(spec, &n) || n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch: --nproc_per_node=", spec, " must be a positive number, gpu, cpu or auto"));
  }
  return n;
}

int UsableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(
    int rank, int world_size, int local_rank, int local_world_size, int group_rank, const std::string& master_addr,
    int master_port, const std::string& store_secret, int restart_count) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
      {"GROUP_RANK", std::to_string(group_rank)},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {kLauncherStoreEnv, "1"},
      {kRestartCountEnv, std::to_string(restart_count)},
  };
  if (!store_secret.empty()) env.emplace_back(kStoreSecretEnv, store_secret);
  // Workers sharing a machine would each start one OpenMP/Eigen thread per core and fight over them.
  if (local_world_size > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

std::vector<WorkerProcessSpec> WorkerSpecs(const WorkerGroup& group, int round) {
  std::vector<WorkerProcessSpec> specs;
  for (int local = 0; local < group.nproc; ++local) {
    const int rank = group.node_rank * group.nproc + local;
    specs.push_back({rank, local, group.argv,
                     WorkerEnvironment(rank, group.world_size, local, group.nproc, group.node_rank, group.master_addr,
                                       group.master_port, group.store_secret, round)});
    for (const auto& kv : group.extra_env) specs.back().env.push_back(kv);
  }
  return specs;
}

}  // namespace tinyddp::dist
