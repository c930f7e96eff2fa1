// Memory estimate: see memory_estimate.h.
#include "examples/internal/memory_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "dist/elastic/worker_limits.h"
#include "dist/launch/spawn.h"
#include "dist/launch/workers.h"
#include "dist/worker/env.h"
#include "tensor/cuda_device.h"

namespace tinyddp::examples {
namespace {

// Libraries, threads, collective buffers: the floor worker_limits.h counts for any worker.
constexpr double kRuntimeBytes = static_cast<double>(dist::kMinWorkerMemory);
constexpr int64_t kEvalBatchRows = 1000;             // EvaluateShard's batch (evaluate.h)
constexpr int64_t kFashionMnistTrain = 60000, kFashionMnistTest = 10000, kFashionMnistPixels = 784;
constexpr int64_t kClasses = 10;
// cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712).
constexpr int64_t kCgroupUnlimited = int64_t{1} << 62;

std::string Size(double bytes) {
  constexpr double kMiB = 1 << 20, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
  if (bytes >= kTiB) return absl::StrFormat("%.1f TiB", bytes / kTiB);
  return bytes >= kGiB ? absl::StrFormat("%.1f GiB", bytes / kGiB) : absl::StrFormat("%.1f MiB", bytes / kMiB);
}

// The first number in a file (a cgroup's memory.max, ...); -1 for "max", a missing file or no number.
int64_t ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  int64_t n = -1;
  if (in >> word && absl::SimpleAtoi(word, &n)) return n;
  return -1;
}

// "Key:   123 kB" from a /proc file such as meminfo or status, in bytes; -1 when absent.
int64_t ReadKib(const std::string& path, absl::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, key) || !absl::ConsumePrefix(&rest, ":")) continue;
    std::istringstream fields{std::string(rest)};
    int64_t kib = -1;
    if (fields >> kib) return kib * 1024;
  }
  return -1;
}

// The cgroup limit with the least room left, from the process's cgroup `path` (as /proc/self/cgroup
// names it) up to the hierarchy's root at `mount`: a parent's limit binds its children too.
void TightestCgroupLimit(const std::string& mount, std::string path, const char* limit_file, const char* usage_file,
                         HostMemory& host) {
  while (true) {
    const std::string dir = mount + (path == "/" ? "" : path);
    const int64_t limit = ReadNumber(dir + "/" + limit_file);
    if (limit >= 0 && limit < kCgroupUnlimited) {
      const int64_t usage = std::max<int64_t>(ReadNumber(dir + "/" + usage_file), 0);
      if (host.cgroup_limit < 0 || limit - usage < host.cgroup_limit - host.cgroup_usage) {
        host.cgroup_limit = limit;
        host.cgroup_usage = usage;
      }
    }
    if (path.empty() || path == "/") return;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

double Sum(const std::vector<int64_t>& v, size_t from) {
  double s = 0;
  for (size_t i = from; i < v.size(); ++i) s += static_cast<double>(v[i]);
  return s;
}

}  // namespace

double MemoryEstimate::PerRank() const {
  double total = 0;
  for (const auto& [name, bytes] : parts) total += bytes;
  return total;
}

std::string MemoryEstimate::Breakdown() const {
  std::vector<std::string> pieces;
  for (const auto& [name, bytes] : parts) pieces.push_back(absl::StrCat(name, " ", Size(bytes)));
  return absl::StrJoin(pieces, ", ");
}

MemoryEstimate EstimateRankMemory(const TrainOptions& o, int world_size, bool on_gpu) {
  const bool synthetic = o.dataset == "synthetic";
  std::vector<int64_t> dims = {synthetic ? o.synthetic_input_size : kFashionMnistPixels};
  dims.insert(dims.end(), o.hidden.begin(), o.hidden.end());
  dims.push_back(kClasses);
  double params = 0;  // each Linear: a [out, in] weight and an [out] bias
  for (size_t i = 0; i + 1 < dims.size(); ++i) params += (static_cast<double>(dims[i]) + 1) * dims[i + 1];
  const double compute_bytes = o.precision == "bf16" ? 2 : 4;
  const double widest = static_cast<double>(*std::max_element(dims.begin() + 1, dims.end()));
  const double input = static_cast<double>(dims[0]);
  const int64_t train_rows = synthetic ? o.synthetic_examples : kFashionMnistTrain;
  const int64_t test_rows = synthetic ? std::max<int64_t>(o.synthetic_examples / 5, 1) : kFashionMnistTest;
  const std::string hidden = absl::StrCat("--hidden=", absl::StrJoin(o.hidden, ","));
  const double optimizer_state = o.optimizer == "adamw" ? 8 * params : (o.momentum != 0 ? 4 * params : 0);

  struct Part {
    std::string name;
    double bytes;
    std::string flag;  // the flag behind it, to name when it is the largest
  };
  std::vector<Part> parts;
  if (!on_gpu) {  // on a GPU these live in device memory
    parts.push_back({"parameters", 4 * params, hidden});  // whole even under ZeRO-3, which builds the model first
    if (o.zero >= 2) {  // ZeRO-2 and -3: each rank keeps 1/world of the gradients (plus buckets in flight)
      parts.push_back({absl::StrCat("gradients (1/", world_size, ", ZeRO-", o.zero, ")"), 4 * params / world_size,
                       hidden});
    } else {
      parts.push_back({"gradients", 4 * params, hidden});
    }
    const std::string optimizer = o.optimizer == "adamw" ? "AdamW moments" : "SGD momentum";
    if (o.zero >= 1) {  // ZeRO-1, -2, -3: each rank keeps 1/world of the state
      parts.push_back({absl::StrCat(optimizer, " (1/", world_size, ", ZeRO-", o.zero, ")"),
                       optimizer_state / world_size, hidden});
    } else {
      parts.push_back({optimizer, optimizer_state, hidden});
    }
    if (o.precision == "bf16") parts.push_back({"bfloat16 compute copies", 2 * params, hidden});
    // Forward keeps each layer's output and its ReLU (2 per width); backward adds two at the widest.
    const double train = o.batch_size * ((2 * Sum(dims, 1) + 2 * widest) * compute_bytes + 4 * input);
    // Evaluation keeps no graph: about one layer's input and output at a time, but its batches are larger.
    const int64_t eval_rows = std::min<int64_t>(kEvalBatchRows, (test_rows + world_size - 1) / world_size);
    const double eval = eval_rows * (2 * widest * compute_bytes + 4 * input);
    if (train >= eval) {
      parts.push_back({absl::StrCat("activations of a batch of ", o.batch_size), train,
                       absl::StrCat(hidden, " with --batch_size=", o.batch_size)});
    } else {
      parts.push_back({absl::StrCat("activations of an evaluation batch of ", eval_rows), eval, hidden});
    }
  }
  // Every rank loads the whole dataset (the sampler picks its share): float32 features, int64 labels.
  parts.push_back({"the dataset", static_cast<double>(train_rows + test_rows) * (4 * input + 8),
                   synthetic ? absl::StrCat("--synthetic_examples=", o.synthetic_examples,
                                            " x --synthetic_input_size=", o.synthetic_input_size)
                             : "--dataset=fashion_mnist"});
  parts.push_back({"runtime", kRuntimeBytes, "this run"});
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.bytes > b.bytes; });

  MemoryEstimate estimate;
  for (const Part& part : parts) {
    if (part.bytes > 0) estimate.parts.emplace_back(part.name, part.bytes);
  }
  // Rank 0 reads each checkpoint file back whole (for its CRC-32): the model's, or the optimizer's.
  if (!o.checkpoint_dir.empty()) estimate.checkpoint_staging = std::max(4 * params, optimizer_state);
  const Part& biggest = parts.front();
  estimate.biggest_flag = biggest.flag;
  if (biggest.flag == hidden || absl::StartsWith(biggest.name, "activations")) {
    estimate.hints.push_back("a smaller --hidden");
  }
  if (absl::StartsWith(biggest.name, "activations of a batch")) estimate.hints.push_back("a smaller --batch_size");
  if (o.zero == 0 && world_size > 1 && optimizer_state > 0 && !on_gpu) {
    estimate.hints.push_back("--zero=1 (each rank keeps 1/world of the optimizer state)");
  }
  if (biggest.name == "the dataset" && synthetic) estimate.hints.push_back("fewer --synthetic_examples");
  return estimate;
}

int64_t HostMemory::Usable() const {
  if (cgroup_limit < 0) return available;
  const int64_t room = std::max<int64_t>(cgroup_limit - cgroup_usage, 0);
  return available < 0 ? room : std::min(available, room);
}

HostMemory ReadHostMemory(const std::string& root) {
  HostMemory host;
  host.available = ReadKib(root + "/proc/meminfo", "MemAvailable");
  host.address_space_used = std::max<int64_t>(ReadKib(root + "/proc/self/status", "VmSize"), 0);
  // /proc/self/cgroup: "0::/path" for cgroup v2, "4:memory:/path" for v1's memory controller.
  std::ifstream cgroups(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    const std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    if (fields[0] == "0" && fields[1].empty()) {
      TightestCgroupLimit(root + "/sys/fs/cgroup", fields[2], "memory.max", "memory.current", host);
    }
    const std::vector<std::string> controllers = absl::StrSplit(fields[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end()) {
      TightestCgroupLimit(root + "/sys/fs/cgroup/memory", fields[2], "memory.limit_in_bytes",
                          "memory.usage_in_bytes", host);
    }
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    host.address_space = static_cast<int64_t>(limit.rlim_cur);
  }
  return host;
}

absl::Status CheckMemory(const MemoryEstimate& estimate, int ranks_on_host, const HostMemory& host) {
  const double per_rank = estimate.PerRank();
  const double staging = estimate.checkpoint_staging;
  const double total = per_rank * ranks_on_host + staging;
  std::string message =
      absl::StrCat(estimate.biggest_flag, " needs about ", Size(per_rank), " per rank (", estimate.Breakdown(), ")");
  bool refused = false;
  const int64_t usable = host.Usable();
  if (usable >= 0 && total > static_cast<double>(usable)) {
    refused = true;
    std::string offer = absl::StrCat("MemAvailable ", host.available < 0 ? "unknown" : Size(host.available));
    if (host.cgroup_limit >= 0) {
      absl::StrAppend(&offer, "; cgroup limit ", Size(host.cgroup_limit), ", ", Size(host.cgroup_usage),
                      " of it in use");
    }
    absl::StrAppend(&message, " x ", ranks_on_host, ranks_on_host == 1 ? " rank" : " ranks",
                    staging > 0 ? absl::StrCat(" + ", Size(staging), " on rank 0 to write a checkpoint") : "",
                    " = ", Size(total), ", but this machine has ", Size(usable), " available (", offer, ")");
  }
  const double one_process = per_rank + staging + static_cast<double>(host.address_space_used);
  if (host.address_space >= 0 && one_process > static_cast<double>(host.address_space)) {
    absl::StrAppend(&message, refused ? "; and " : ", but ", "ulimit -v allows each process ",
                    Size(host.address_space), " of address space (a rank maps ", Size(host.address_space_used),
                    " before it allocates anything)");
    refused = true;
  }
  if (!refused) return absl::OkStatus();
  std::vector<std::string> hints = estimate.hints;
  if (ranks_on_host > 1) hints.push_back("fewer ranks (--nproc)");
  return absl::ResourceExhaustedError(absl::StrCat(
      message, ". Hint: ", hints.empty() ? "run it on a larger machine" : absl::StrJoin(hints, ", or "),
      "; --ignore_worker_limits starts it anyway"));
}

absl::Status CheckMemoryFits(const TrainOptions& o) {
  if (o.ignore_worker_limits) return absl::OkStatus();
  const int gpus = cuda::DeviceCount();
  int ranks = 0, world = 0;
  if (dist::IsWorker()) {  // started by a launcher: it says how many ranks share this machine
    absl::StatusOr<dist::WorkerEnv> env = dist::ReadWorkerEnv();
    if (!env.ok() || env->local_rank != 0) return absl::OkStatus();  // InitProcessGroup reports a bad one
    ranks = env->local_world_size;
    world = env->world_size;
  } else {  // the workers SpawnWorkersIfNeeded will start (spawn.h), counted the same way
    ranks = o.nproc > 0 ? static_cast<int>(o.nproc)
                        : (gpus > 0 && o.backend != "gloo" ? gpus : dist::SpawnOptions().cpu_ranks);
    if (const char* nproc = std::getenv("TINYDDP_NPROC")) {
      absl::StatusOr<int> n = dist::ResolveNprocPerNode(nproc, gpus, dist::UsableCpuCount());
      if (n.ok()) ranks = *n;  // a bad value is refused by SpawnWorkersIfNeeded
    }
    world = ranks;
  }
  const HostMemory host = ReadHostMemory();
  // So many ranks that not even their runtime fits: worker_limits.h refuses that next, naming the count.
  if (host.Usable() >= 0 && ranks * kRuntimeBytes > static_cast<double>(host.Usable())) return absl::OkStatus();
  const bool on_gpu = o.backend == "nccl" || (o.backend == "auto" && gpus > 0 && ranks <= gpus);
  RETURN_IF_ERROR(CheckMemory(EstimateRankMemory(o, std::max(world, 1), on_gpu), std::max(ranks, 1), host));
  if (!on_gpu || gpus == 0) return absl::OkStatus();
  return CheckDeviceMemory(o, std::max(world, 1), cuda::DeviceTotalMemory(0),
                           absl::StrCat("cuda:0 (", cuda::DeviceDescription(0), ")"));
}

absl::Status CheckDeviceMemory(const TrainOptions& o, int world_size, int64_t device_bytes, const std::string& device) {
  MemoryEstimate on_device = EstimateRankMemory(o, world_size, /*on_gpu=*/false);
  // The dataset stays in host memory and the runtime floor is the host's: what is left lives on the GPU.
  auto& parts = on_device.parts;
  parts.erase(std::remove_if(parts.begin(), parts.end(),
                             [](const auto& part) { return part.first == "the dataset" || part.first == "runtime"; }),
              parts.end());
  constexpr double kContextBytes = 1 << 30;  // the CUDA context, cuBLAS workspaces and NCCL's buffers
  const double per_rank = on_device.PerRank();
  if (device_bytes <= 0 || per_rank + kContextBytes <= static_cast<double>(device_bytes)) return absl::OkStatus();
  std::vector<std::string> hints = on_device.hints;
  if (o.zero == 0 && world_size > 1) hints.push_back("--zero=3 (each GPU keeps 1/world of the model's state)");
  return absl::ResourceExhaustedError(absl::StrCat(
      on_device.biggest_flag, " needs about ", Size(per_rank), " of GPU memory per rank (", on_device.Breakdown(),
      ") + about ", Size(kContextBytes), " for CUDA, cuBLAS and NCCL, but ", device, " has ",
      Size(static_cast<double>(device_bytes)), ". Hint: ", hints.empty() ? "a larger GPU" : absl::StrJoin(hints, ", or "),
      "; --ignore_worker_limits starts it anyway"));
}

}  // namespace tinyddp::examples
