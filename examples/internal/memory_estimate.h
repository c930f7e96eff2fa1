// Memory estimate: before anything large is allocated, will this run fit on this machine? ddp_mlp asks
// in main(), before it starts its ranks, so that `--hidden=100000000` is refused in a second with the
// figures instead of growing every rank until the out-of-memory killer picks a process (perhaps someone
// else's) or an address-space limit ends it in abort().
//
// What one rank holds, about (EstimateRankMemory; P = the model's parameters, 4 bytes each):
//   parameters 4P, gradients 4P (DDP's buckets are views of them), the optimizer state (SGD momentum 4P,
//   AdamW's two moments 8P; ZeRO-1 keeps 1/world of it), bfloat16 compute copies 2P (--precision=bf16),
//   the activations of one batch (a training batch forward and backward, or an evaluation batch of up to
//   1000 rows, whichever is larger), the whole dataset (every rank loads it), and the runtime's floor
//   (worker_limits.h's kMinWorkerMemory). Rank 0 also reads a checkpoint's largest file back as it writes one.
// What the machine offers (ReadHostMemory): MemAvailable from /proc/meminfo, the limit of this process's
// memory cgroup (v2 memory.max, v1 memory.limit_in_bytes) less what the cgroup already uses, and
// RLIMIT_AS (`ulimit -v`), which bounds each process on its own. Ranks on GPUs keep the model's state in
// device memory, which tensor/cuda_device.h cannot query yet: for them only the host's share is checked.
//
// Sits beside dist/elastic/worker_limits.h (how many processes fit at all), between the flags
// (train_options.h) and the start of the workers (dist/launch/spawn.h).
#ifndef TINYDDP_EXAMPLES_INTERNAL_MEMORY_ESTIMATE_H_
#define TINYDDP_EXAMPLES_INTERNAL_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "examples/internal/train_options.h"

namespace tinyddp::examples {

/// What one rank of a run holds, in bytes (double: a width of 10^11 must not overflow the estimate).
struct MemoryEstimate {
  /// ("parameters", bytes), ("gradients", ...), ...: the parts, largest first, each on every rank.
  std::vector<std::pair<std::string, double>> parts;
  double checkpoint_staging = 0;  // once per job, on rank 0, while it writes a checkpoint
  std::string biggest_flag;       // the flag behind the largest part: "--hidden=100000000"
  std::vector<std::string> hints;  // what would shrink it: "a smaller --hidden", "--zero=1 shards ..."

  double PerRank() const;
  /// "parameters 16.0 GiB, gradients 16.0 GiB, ...".
  std::string Breakdown() const;
};

/// The estimate for `o` on `world_size` ranks, `on_gpu` when they keep the model on their GPU (then the
/// parts that live there are left out: see the header comment).
MemoryEstimate EstimateRankMemory(const TrainOptions& o, int world_size, bool on_gpu);

/// What this machine offers a job's processes, in bytes; -1 where there is no limit (or it is unknown).
struct HostMemory {
  int64_t available = -1;         // MemAvailable
  int64_t cgroup_limit = -1;      // the tightest memory limit of this process's cgroup and its parents
  int64_t cgroup_usage = -1;      // what that cgroup uses now
  int64_t address_space = -1;     // RLIMIT_AS, per process
  int64_t address_space_used = 0;  // this process's VmSize now: what a freshly started rank maps already

  /// What the job's processes together may still allocate: MemAvailable, or the cgroup's room if less.
  int64_t Usable() const;
};

/// Reads HostMemory from /proc and /sys/fs/cgroup under `root` ("" for the real ones; tests pass a
/// folder holding proc/meminfo, proc/self/cgroup, proc/self/status and sys/fs/cgroup/...). The
/// address-space limit is this process's getrlimit, whatever `root`.
HostMemory ReadHostMemory(const std::string& root = "");

/// OK when `ranks_on_host` ranks estimated at `estimate` fit `host`. Otherwise ResourceExhausted with the
/// figures, e.g. "--hidden=100000000 needs about 48.5 GiB per rank (...) x 2 ranks = 97.0 GiB, but this
/// machine has 20.1 GiB available (MemAvailable 22.3 GiB; cgroup limit 24.0 GiB, 3.9 GiB of it in use);
/// hint: ...", ending with how to skip the check (--ignore_worker_limits).
absl::Status CheckMemory(const MemoryEstimate& estimate, int ranks_on_host, const HostMemory& host);

/// ddp_mlp's check: the ranks this host will run (the workers SpawnWorkersIfNeeded would start, or, in a
/// worker, LOCAL_WORLD_SIZE) against ReadHostMemory(). In a worker only local rank 0 checks, so that the
/// refusal is printed once. OK without checking under --ignore_worker_limits, and when the ranks are too
/// many for even their runtime (dist/elastic/worker_limits.h refuses that next, naming the count).
absl::Status CheckMemoryFits(const TrainOptions& o);

/// On GPUs each rank keeps the model, its gradients, optimizer state and activations in its own GPU's memory:
/// OK when EstimateRankMemory's device parts (all but the dataset and the runtime) fit in `device_bytes` (less
/// a context's worth), else ResourceExhausted with the figures, naming `device` ("cuda:0, NVIDIA H200 ...").
absl::Status CheckDeviceMemory(const TrainOptions& o, int world_size, int64_t device_bytes, const std::string& device);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_MEMORY_ESTIMATE_H_
