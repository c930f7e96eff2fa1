// LaunchOptions parsing: see launch_options.h.
#include "dist/launch/launch_options.h"

#include <sched.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tinyddp::dist {
namespace {

absl::Status BadArg(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("launch: ", what, "\n\n", LaunchUsage()));
}

absl::Status ParseIntFlag(const std::string& name, const std::string& value, int min, int max, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
    return BadArg(absl::StrCat("--", name, "=", value, " must be an integer in [", min, ", ", max, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* LaunchUsage() {
  return R"(usage: launch [flags] PROGRAM [ARGS...]
Starts PROGRAM once per worker with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR and MASTER_PORT set (and OMP_NUM_THREADS=1 when several workers share a machine),
hosts the job's rendezvous store, and stops every worker when one fails.

  --nproc_per_node=N|gpu|cpu|auto  workers on this machine (default 1): gpu = one per visible GPU,
                                   cpu = one per usable CPU core, auto = gpu if there is a GPU, else cpu
  --nnodes=K                       machines in the job (default 1); start one launch on each
  --node_rank=I                    this machine's index, 0..K-1; node 0 hosts the store
  --master_addr=H                  address of node 0 (default 127.0.0.1)
  --master_port=P                  store port on node 0 (default: a free port for one node, 29500 for several)
  --prefix_output, --tee           prefix every line workers print with "[rank N] "
  --grace_seconds=S                after a failure, SIGTERM then SIGKILL after S seconds (default 5)
  --rendezvous_timeout=S           how long launchers wait for each other (default 300)
  --check                          print CUDA driver/runtime and NCCL versions, the GPUs and their links
  --help                           this text

examples:
  launch --nproc_per_node=gpu bazel-bin/examples/ddp_mlp
  launch --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 --nproc_per_node=8 ./train
)";
}

absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args) {
  LaunchOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;  // PROGRAM: the rest belongs to it
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    name = absl::StrReplaceAll(name, {{"-", "_"}});  // torchrun accepts --nproc-per-node too
    auto take_value = [&]() -> absl::Status {
      if (has_value) return absl::OkStatus();
      if (i + 1 >= args.size()) return BadArg(absl::StrCat("--", name, " needs a value"));
      value = args[++i];
      return absl::OkStatus();
    };
    absl::Status s;
    if (name == "prefix_output" || name == "tee") {
      o.prefix_output = true;
      // torchrun's `--tee 3` picks which streams to tee; we always prefix both, so just skip the number.
      if (name == "tee" && !has_value && i + 1 < args.size() && args[i + 1].size() == 1 &&
          args[i + 1][0] >= '0' && args[i + 1][0] <= '3') {
        ++i;
      }
    } else if (name == "check") {
      o.check = true;
    } else if (name == "help" || name == "h") {
      o.help = true;
    } else if (name == "nproc_per_node") {
      if (!(s = take_value()).ok()) return s;
      o.nproc_per_node = value;
    } else if (name == "nnodes") {
      if (!(s = take_value()).ok() || !(s = ParseIntFlag(name, value, 1, 1 << 20, &o.nnodes)).ok()) return s;
    } else if (name == "node_rank") {
      if (!(s = take_value()).ok() || !(s = ParseIntFlag(name, value, 0, 1 << 20, &o.node_rank)).ok()) return s;
    } else if (name == "master_addr") {
      if (!(s = take_value()).ok()) return s;
      o.master_addr = value;
    } else if (name == "master_port") {
      if (!(s = take_value()).ok() || !(s = ParseIntFlag(name, value, 0, 65535, &o.master_port)).ok()) return s;
    } else if (name == "grace_seconds") {
      if (!(s = take_value()).ok() || !(s = ParseIntFlag(name, value, 0, 3600, &o.grace_seconds)).ok()) return s;
    } else if (name == "rendezvous_timeout") {
      if (!(s = take_value()).ok() ||
          !(s = ParseIntFlag(name, value, 1, 86400, &o.rendezvous_timeout_seconds)).ok()) {
        return s;
      }
    } else {
      return BadArg(absl::StrCat("unknown flag ", arg, " (flags go before PROGRAM)"));
    }
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.help || o.check) return o;
  if (o.program.empty()) return BadArg("no PROGRAM given");
  if (o.node_rank >= o.nnodes) {
    return BadArg(absl::StrCat("--node_rank=", o.node_rank, " must be below --nnodes=", o.nnodes));
  }
  if (o.nnodes > 1 && o.master_port == 0) {
    return BadArg("--master_port=0 (pick a free port) only works with one node: other nodes could not know it");
  }
  return o;
}

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
