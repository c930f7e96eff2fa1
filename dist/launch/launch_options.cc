// ResolveNprocPerNode and UsableCpuCount: see launch_options.h.
#include "dist/launch/launch_options.h"

#include <sched.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

absl::StatusOr<int> ResolveNprocPerNode(const std::string& spec, int gpu_count, int cpu_count) {
  if (spec == "gpu") {
    if (gpu_count == 0) {
      return absl::InvalidArgumentError(
          "launch: --nproc_per_node=gpu, but no GPU is visible (no driver or device, CUDA_VISIBLE_DEVICES empty, "
          "or a CPU-only build); use --nproc_per_node=cpu, auto, or a number");
    }
    return gpu_count;
  }
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

}  // namespace tinyddp::dist
