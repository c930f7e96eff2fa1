// launch's flags and their parsing (dist/elastic/launch_flags.h). Each flag defaults to its LaunchOptions
// field.
#include "dist/elastic/launch_flags.h"

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "dist/worker/env.h"
#include "dist/worker/job_timeout.h"
#include "dist/engines/pet_flags.h"

namespace {
const tinyddp::dist::LaunchOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, nproc_per_node, kDefaults.nproc_per_node,
          "workers on this machine: N, gpu (one per visible GPU), cpu (one per usable CPU core), auto (gpu if "
          "there is a GPU, else cpu)");
ABSL_FLAG(int32_t, nnodes, kDefaults.nnodes, "machines in the job; start one launch on each");
ABSL_FLAG(int32_t, node_rank, kDefaults.node_rank, "this machine's index, 0..nnodes-1; node 0 hosts the store");
ABSL_FLAG(std::string, master_addr, kDefaults.master_addr, "address of node 0 (IPv6: ::1 or [::1])");
ABSL_FLAG(int32_t, master_port, kDefaults.master_port,
          "store port on node 0; -1: a free port for one node, 29500 for several");
ABSL_FLAG(bool, standalone, false,
          "torchrun's --standalone: this machine is the whole job (--nnodes=1, the store on 127.0.0.1 at a free "
          "port), which is also the default");
ABSL_FLAG(int32_t, rendezvous_timeout, kDefaults.rendezvous_timeout_seconds,
          "seconds the launchers of a multi-node job wait for each other; 0 = --timeout");
ABSL_FLAG(std::string, timeout, "",
          "bound on every wait of the job (store, rendezvous, collectives), handed to the workers as "
          "TINYDDP_TIMEOUT: seconds or 30s, 2m; empty = the program's own --timeout, else $TINYDDP_TIMEOUT, else "
          "300s");
ABSL_FLAG(int32_t, max_restarts, kDefaults.max_restarts,
          "when a worker fails, stop all and start them again, this many times (workers see "
          "TINYDDP_RESTART_COUNT; ddp_mlp resumes from its last checkpoint)");
ABSL_FLAG(bool, ignore_worker_limits, kDefaults.ignore_worker_limits,
          "start --nproc_per_node workers even if this machine's memory, process or file limits cannot hold them");
ABSL_FLAG(bool, prefix_output, kDefaults.prefix_output, "prefix every line workers print with \"[rank N] \"");
ABSL_FLAG(std::string, tee, "",
          "torchrun's --tee STREAMS (0-3, or per rank as 0:3,1:1): any but 0 works as --prefix_output");
ABSL_FLAG(int32_t, grace_seconds, kDefaults.grace_seconds,
          "after a failure, SIGTERM the workers, then SIGKILL after this many seconds");
ABSL_FLAG(int32_t, preempt_grace, kDefaults.preempt_grace_seconds,
          "when launch itself gets SIGTERM or SIGUSR1 (a preemption, a time limit, a pod deleted): SIGTERM the "
          "workers and give them this many seconds to checkpoint before SIGKILL; keep it below the engine's own "
          "(Slurm's KillWait, Kubernetes' terminationGracePeriodSeconds)");
ABSL_FLAG(bool, check, kDefaults.check,
          "print CUDA driver/runtime and NCCL versions, the GPUs and their links, and exit");

namespace tinyddp::dist {
namespace {

const std::vector<FlagGroup>& Flags() {
  static const auto* groups = new std::vector<FlagGroup>{
      {"workers",
       {"nproc_per_node", "prefix_output", "tee", "grace_seconds", "preempt_grace", "ignore_worker_limits"}},
      {"failures", {"timeout", "max_restarts"}},
      {"several machines", {"nnodes", "node_rank", "master_addr", "master_port", "rendezvous_timeout", "standalone"}},
      {"other", {"check"}},
  };
  return *groups;
}

// The program's own --timeout ("" when it has none): tinyddp programs take one (ddp_mlp), and a launcher
// that knows it waits as long as its workers do.
std::string ProgramTimeout(const std::vector<std::string>& program) {
  for (size_t i = 1; i < program.size(); ++i) {
    if (absl::StartsWith(program[i], "--timeout=")) return program[i].substr(10);
    if (program[i] == "--timeout" && i + 1 < program.size()) return program[i + 1];
  }
  return "";
}

absl::Status BadArg(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("launch: ", what, "\n\n", LaunchUsage()));
}

absl::Status CheckRange(const std::string& name, int value, int min, int max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return BadArg(absl::StrCat("--", name, "=", value, " must be an integer in [", min, ", ", max, "]"));
}

// torchrun's --tee: 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per rank as "0:3,1:1".
bool IsStreams(absl::string_view s) { return s.size() == 1 && s[0] >= '0' && s[0] <= '3'; }
bool IsTeeSpec(const std::string& tee) {
  if (IsStreams(tee)) return true;
  for (absl::string_view item : absl::StrSplit(tee, ',')) {
    std::pair<absl::string_view, absl::string_view> rank_streams = absl::StrSplit(item, absl::MaxSplits(':', 1));
    int rank = 0;
    if (!absl::SimpleAtoi(rank_streams.first, &rank) || rank < 0 || !IsStreams(rank_streams.second)) return false;
  }
  return true;
}

}  // namespace

std::string LaunchUsage() {
  return absl::StrCat(
      "usage: launch [flags] PROGRAM [ARGS...]\n"
      "Starts PROGRAM once per worker with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "MASTER_ADDR and MASTER_PORT set (and OMP_NUM_THREADS=1 when several workers share a machine),\n"
      "hosts the job's rendezvous store, and stops every worker when one fails. Flags go before PROGRAM\n"
      "(--name=value or --name value; dashes or underscores); everything after PROGRAM is PROGRAM's.\n"
      "torchrun's PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, ... (a Kubeflow pod's) are\n"
      "read as the flags they stand for; the command line wins. On SIGTERM or SIGUSR1 (a preemption) the\n"
      "workers get SIGTERM and --preempt_grace to checkpoint; exit status 75 from them is launch's, not restarted.\n\n",
      FlagsHelp(Flags()),
      "\nexamples:\n"
      "  launch --nproc_per_node=gpu bazel-bin/examples/ddp_mlp --epochs=20\n"
      "  launch --nproc_per_node=2 --max_restarts=3 --timeout=2m bazel-bin/examples/ddp_mlp --checkpoint_dir=ckpt\n"
      "  launch --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 --nproc-per-node=8 ./train\n");
}

absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args, const EnvVars& env) {
  // torchrun reads each flag also from PET_<FLAG>, as Kubeflow sets them in every pod: they go first, so
  // that a flag given on the command line wins (pet_flags.h, LaunchFlagsFromEnvironment).
  absl::StatusOr<std::vector<std::string>> from_env = LaunchFlagsFromEnvironment(env);
  if (!from_env.ok()) return BadArg(std::string(from_env.status().message()));
  std::vector<std::string> all = *from_env;
  all.insert(all.end(), args.begin(), args.end());
  absl::StatusOr<CommandLine> command_line = ParseCommandLineFlags(all, Flags());
  if (!command_line.ok()) return BadArg(std::string(command_line.status().message()));
  LaunchOptions o;
  o.help = command_line->help;
  if (o.help) return o;
  o.program = command_line->rest;
  // Under `bazel run //dist/launch -- ... bazel-bin/examples/x` the path was typed where Bazel was started
  // (BUILD_WORKING_DIRECTORY), not in the runfiles folder this process runs in. A bare name is PATH's.
  const char* typed_in = std::getenv("BUILD_WORKING_DIRECTORY");
  if (typed_in != nullptr && *typed_in != '\0' && !o.program.empty() && o.program[0].find('/') != std::string::npos &&
      o.program[0][0] != '/') {
    o.program[0] = absl::StrCat(typed_in, "/", o.program[0]);
  }
  o.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  o.nnodes = absl::GetFlag(FLAGS_nnodes);
  o.node_rank = absl::GetFlag(FLAGS_node_rank);
  o.master_addr = StoreHost(absl::GetFlag(FLAGS_master_addr));
  o.master_port = absl::GetFlag(FLAGS_master_port);
  o.rendezvous_timeout_seconds = absl::GetFlag(FLAGS_rendezvous_timeout);
  o.grace_seconds = absl::GetFlag(FLAGS_grace_seconds);
  o.preempt_grace_seconds = absl::GetFlag(FLAGS_preempt_grace);
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o.ignore_worker_limits = absl::GetFlag(FLAGS_ignore_worker_limits);
  const std::string timeout = absl::GetFlag(FLAGS_timeout), program_timeout = ProgramTimeout(o.program);
  const char* env_timeout = std::getenv(kTimeoutEnv);
  absl::StatusOr<std::chrono::milliseconds> resolved =
      !timeout.empty()           ? ParseTimeout(timeout, "--timeout")
      : !program_timeout.empty() ? ParseTimeout(program_timeout, "the program's --timeout")
                                 : ResolveJobTimeout();
  if (!resolved.ok()) return BadArg(std::string(resolved.status().message()));
  o.timeout = *resolved;
  o.timeout_source = !timeout.empty()                               ? "--timeout"
                     : !program_timeout.empty()                     ? "the program's --timeout"
                     : env_timeout != nullptr && *env_timeout != 0 ? kTimeoutEnv
                                                                    : "the default";
  o.check = absl::GetFlag(FLAGS_check);
  const std::string tee = absl::GetFlag(FLAGS_tee);
  if (!tee.empty() && !IsTeeSpec(tee)) {
    return BadArg(absl::StrCat("--tee=", tee, ": expected 0, 1, 2, 3 or a per-rank map such as 0:3,1:1 ",
                               "(torchrun's --tee takes a value: --tee 3 PROGRAM)"));
  }
  // We prefix both streams' lines whenever torchrun would tee any.
  o.prefix_output = absl::GetFlag(FLAGS_prefix_output) || (!tee.empty() && tee != "0");

  for (const absl::Status& s : {CheckRange("nnodes", o.nnodes, 1, 1 << 20),
                                CheckRange("node_rank", o.node_rank, 0, 1 << 20),
                                CheckRange("master_port", o.master_port, -1, 65535),
                                CheckRange("grace_seconds", o.grace_seconds, 0, 3600),
                                CheckRange("preempt_grace", o.preempt_grace_seconds, 0, 3600),
                                CheckRange("rendezvous_timeout", o.rendezvous_timeout_seconds, 0, 86400),
                                CheckRange("max_restarts", o.max_restarts, 0, 1000)}) {
    if (!s.ok()) return s;
  }
  if (absl::GetFlag(FLAGS_standalone)) {
    if (o.nnodes != 1) return BadArg(absl::StrCat("--standalone is a one-node job, but --nnodes=", o.nnodes));
    o.master_addr = "127.0.0.1";
    o.master_port = -1;
  }
  if (o.check) return o;
  if (o.program.empty()) return BadArg("no PROGRAM given");
  if (o.node_rank >= o.nnodes) {
    return BadArg(absl::StrCat("--node_rank=", o.node_rank, " must be below --nnodes=", o.nnodes));
  }
  if (o.nnodes > 1 && o.master_port == 0) {
    return BadArg("--master_port=0 (pick a free port) only works with one node: other nodes could not know it");
  }
  return o;
}

}  // namespace tinyddp::dist
