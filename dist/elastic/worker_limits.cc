// How many workers: see worker_limits.h.
#include "dist/elastic/worker_limits.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist {
namespace {

// The first number in a file, or the one after `label` ("MemAvailable:"); -1 for "max", absent files and labels.
int64_t ReadNumber(const std::string& path, const std::string& label = "") {
  std::ifstream in(path);
  std::string word;
  while (!label.empty() && in >> word && word != label) {
  }
  int64_t n = -1;
  return in >> word && absl::SimpleAtoi(word, &n) ? n : -1;
}

int64_t Limit(int resource) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int64_t>(r.rlim_cur);
}

}  // namespace


MachineCapacity ReadMachineCapacity() {
  MachineCapacity c;
  const int64_t kib = ReadNumber("/proc/meminfo", "MemAvailable:");
  c.available_memory = kib < 0 ? -1 : kib * 1024;
  // Inside a container the cgroup's limit may be far below the machine's memory.
  const int64_t cgroup_max = ReadNumber("/sys/fs/cgroup/memory.max");
  if (cgroup_max > 0) {
    const int64_t left = cgroup_max - std::max<int64_t>(ReadNumber("/sys/fs/cgroup/memory.current"), 0);
    c.available_memory = c.available_memory < 0 ? left : std::min(c.available_memory, left);
  }
  c.max_user_threads = Limit(RLIMIT_NPROC);
  c.max_pids = ReadNumber("/proc/sys/kernel/pid_max");
  c.max_open_files = Limit(RLIMIT_NOFILE);
  return c;
}

absl::Status CheckWorkerCount(int64_t workers, const MachineCapacity& capacity, bool one_gpu_each, int gpus,
                              const std::string& what, const std::string& override_hint) {
  std::vector<std::string> problems;
  if (capacity.available_memory >= 0 && workers * kMinWorkerMemory > capacity.available_memory) {
    problems.push_back(absl::StrFormat("%.1f GiB of available memory holds at most %d at %d MiB each (the least a "
                                       "worker needs)", static_cast<double>(capacity.available_memory) / (1 << 30),
                                       capacity.available_memory / kMinWorkerMemory, kMinWorkerMemory >> 20));
  }
  if (capacity.max_user_threads >= 0 && workers * kThreadsPerWorker > capacity.max_user_threads) {
    problems.push_back(absl::StrCat("the process limit (ulimit -u ", capacity.max_user_threads, ") allows at most ",
                                    capacity.max_user_threads / kThreadsPerWorker, " at ", kThreadsPerWorker,
                                    " threads each"));
  }
  if (capacity.max_pids >= 0 && workers * kThreadsPerWorker > capacity.max_pids) {
    problems.push_back(absl::StrCat("the machine's pid space (kernel.pid_max ", capacity.max_pids,
                                    ") allows at most ", capacity.max_pids / kThreadsPerWorker));
  }
  if (capacity.max_open_files >= 0 && workers * kFdsPerWorker > capacity.max_open_files) {
    problems.push_back(absl::StrCat("this process's file limit (ulimit -n ", capacity.max_open_files,
                                    ") supervises at most ", capacity.max_open_files / kFdsPerWorker, " at ",
                                    kFdsPerWorker, " descriptors each"));
  }
  if (one_gpu_each && workers > gpus) {
    problems.push_back(absl::StrCat("NCCL needs one GPU per worker and ", gpus, " are visible"));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(what, ": ", workers, " workers do not fit on this machine: ",
                                                   absl::StrJoin(problems, "; "), ". Start fewer",
                                                   override_hint.empty() ? "" : ", or pass ", override_hint,
                                                   override_hint.empty() ? "" : " if you know better"));
}

}  // namespace tinyddp::dist
