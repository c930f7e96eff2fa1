// How many workers a machine starts: --nproc_per_node's meanings (torchrun's: a number, gpu, cpu, auto),
// and how many it can hold, checked before any is started, so that `launch --nproc_per_node=100000
// /bin/true` is refused in one line instead of forking until the machine runs out of memory, process
// slots or file descriptors.
//
// The limits are what the machine has, not its core count (several CPU ranks may share a core, as the
// tests do on 2 cores): available memory (MemAvailable, or the cgroup's memory.max if lower) at
// kMinWorkerMemory per worker, the user's process/thread limit (RLIMIT_NPROC, kThreadsPerWorker each),
// the machine's pid space, the launcher's own file descriptors (RLIMIT_NOFILE, kFdsPerWorker each: output
// pipes and store connections), and for NCCL one GPU per worker. `launch --ignore_worker_limits` (and
// ddp_mlp's flag of the same name) skip the check for someone who knows better.
#ifndef TINYDDP_DIST_ELASTIC_WORKER_LIMITS_H_
#define TINYDDP_DIST_ELASTIC_WORKER_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tinyddp::dist {

/// The least memory a worker process needs (runtime, libraries, collective buffers): a floor, not an estimate.
inline constexpr int64_t kMinWorkerMemory = int64_t{64} << 20;
/// Threads a worker runs at least (main, data prefetch, the transport's) against RLIMIT_NPROC.
inline constexpr int64_t kThreadsPerWorker = 4;
/// File descriptors the supervising process spends per worker (2 output pipes, store connections).
inline constexpr int64_t kFdsPerWorker = 8;

/// What this machine offers; -1 means unlimited or unknown (that limit is not checked).
struct MachineCapacity {
  int64_t available_memory = -1;  // bytes
  int64_t max_user_threads = -1;  // RLIMIT_NPROC (counts threads)
  int64_t max_pids = -1;          // kernel.pid_max
  int64_t max_open_files = -1;    // RLIMIT_NOFILE of this process
};

/// Reads /proc/meminfo, the cgroup's memory.max and memory.current, getrlimit and kernel.pid_max.
MachineCapacity ReadMachineCapacity();

/// OK when `workers` processes fit `capacity` (and `gpus` when one_gpu_each). Otherwise
/// ResourceExhausted that starts with `what` (e.g. "--nproc_per_node=100000"), lists every limit it
/// exceeds with the most that fit, and ends with `override_hint` (how to skip the check).
absl::Status CheckWorkerCount(int64_t workers, const MachineCapacity& capacity, bool one_gpu_each, int gpus,
                              const std::string& what, const std::string& override_hint);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_WORKER_LIMITS_H_
