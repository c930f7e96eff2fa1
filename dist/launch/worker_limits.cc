// How many workers fit: see worker_limits.h.
#include "dist/launch/worker_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace tinyddp::dist {
namespace {

// The first whitespace-separated number in a file, or -1 ("max" and absent files included).
int64_t ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  int64_t n = -1;
  if (in >> word && absl::SimpleAtoi(word, &n)) return n;
  return -1;
}

// MemAvailable from /proc/meminfo, in bytes; -1 when absent.
int64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "MemAvailable:")) continue;
    std::istringstream fields{std::string(rest)};
    int64_t kib = -1;
    if (fields >> kib) return kib * 1024;
  }
  return -1;
}

int64_t Limit(int resource) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int64_t>(r.rlim_cur);
}

std::string GiB(int64_t bytes) { return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

MachineCapacity ReadMachineCapacity() {
  MachineCapacity c;
  c.available_memory = MemAvailable();
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
    problems.push_back(absl::StrCat(GiB(capacity.available_memory), " of available memory holds at most ",
                                    capacity.available_memory / kMinWorkerMemory, " at ", kMinWorkerMemory >> 20,
                                    " MiB each (the least a worker needs)"));
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
