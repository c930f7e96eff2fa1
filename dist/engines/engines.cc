// The engines' variables: see engines.h. One table names each engine's variables; one reader takes a process's
// place in the job from them, with the few things an engine does its own way (Slurm's node list and
// task lists, Kubeflow's node count) where they apply. It notes every problem instead of stopping at the
// first, so one run tells the user everything to fix.
#include "dist/engines/engines.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace tinyddp::dist {
namespace {

// One engine's variables (in EnvSource's order), why they were read, and how to fix what is missing.
struct Engine {
  const char* name;
  const char* why;
  const char* rank;        // global rank
  const char* size;        // world size
  const char* local_rank;  // rank on this machine ("": the engine runs one process per machine)
  const char* local_size;  // processes on this machine
  const char* node;        // index of this machine ("": rank / local size, as mpirun places ranks in blocks)
  const char* fix;
};
constexpr Engine kEngines[] = {
    {"env://", "RANK or WORLD_SIZE is set", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
     "start the program with `launch --nproc_per_node=N PROGRAM` (it sets all of them), or export RANK, WORLD_SIZE, "
     "MASTER_ADDR and MASTER_PORT yourself (plus LOCAL_RANK and LOCAL_WORLD_SIZE when several ranks share a "
     "machine whose MASTER_ADDR is not a loopback address)"},
    {"Slurm", "SLURM_PROCID of a job step is set", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
     "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID",
     "run the program with `srun` inside an allocation (srun sets the SLURM_* variables); export "
     "MASTER_ADDR=<host of task 0> and MASTER_PORT if the node list gives no usable address"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK is set", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "",
     "pass the store's address to every rank: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 PROGRAM"},
    {"MPICH (Hydra)", "PMI_RANK is set", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "",
     "pass the store's address to every rank: mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT 29500 "
     "PROGRAM"},
    {"Kubeflow (PET_*)", "PET_NODE_RANK or PET_NNODES is set", "PET_NODE_RANK", "PET_NNODES", "", "", "",
     "run one process per pod (nprocPerNode: 1), or start the pod's processes with `launch` (its --nnodes, "
     "--node_rank, --master_addr and --master_port from PET_*)"},
};
const Engine& EngineOf(EnvSource source) { return kEngines[static_cast<int>(source)]; }

// Looks variables up and collects problems ("WORLD_SIZE is missing", "RANK='x' is not an integer") and
// contradictions ("RANK=3 but SLURM_PROCID=1"), which have a fix of their own.
class VarReader {
 public:
  explicit VarReader(const EnvVars& vars) : vars_(vars) {}

  bool Has(const std::string& name) const { return vars_.count(name) > 0; }
  /// The value; nullopt when unset or empty.
  std::optional<std::string> Get(const std::string& name) const {
    auto it = vars_.find(name);
    return it == vars_.end() || it->second.empty() ? std::nullopt : std::optional<std::string>(it->second);
  }
  /// A required integer: missing or malformed is a problem.
  std::optional<int> Int(const std::string& name) {
    if (!Get(name)) problems.push_back(name + " is missing");
    return Get(name) ? OptionalInt(name) : std::nullopt;
  }
  /// An optional integer: absent is fine, present but malformed is a problem.
  std::optional<int> OptionalInt(const std::string& name) {
    int value = 0;
    if (!Has(name)) return std::nullopt;
    if (absl::SimpleAtoi(vars_.at(name), &value)) return value;
    problems.push_back(absl::StrCat(name, "='", vars_.at(name), "' is not an integer"));
    return std::nullopt;
  }
  /// Two sources of one fact must agree.
  void Agree(const std::string& name, int value, const std::string& other_name, int other_value) {
    if (value != other_value) {
      contradictions.push_back(absl::StrCat(name, "=", value, " but ", other_name, "=", other_value));
    }
  }

  std::vector<std::string> problems;
  std::vector<std::string> contradictions;

 private:
  const EnvVars& vars_;
};

// What an engine's variables say about this process, and the variables that said it (for messages).
struct Reading {
  WorkerEnv env;
  std::string rank_var, size_var, local_rank_var, local_size_var;
};

// ---- Who started this process ----------------------------------------------------------------------

// A job step (srun): the batch script of an sbatch job also carries SLURM_PROCID=0 and the job's task
// count, but it is one process, not task 0 of a parallel step.
bool IsSlurmStep(const EnvVars& v) {
  return v.count("SLURM_PROCID") && (v.count("SLURM_STEP_ID") || v.count("SLURM_STEPID"));
}

// Our launch and torchrun start workers with the full env:// set; the engine's variables a worker
// inherits then describe the launcher (srun's task 0 is the launcher of node 0, not rank 0).
bool StartedByLauncher(const EnvVars& v) {
  auto hosted = v.find(kLauncherStoreEnv);
  return (hosted != v.end() && hosted->second == "1") || v.count("TORCHELASTIC_RUN_ID");
}

// The innermost engine (engines nest: sbatch runs mpirun, whose ranks inherit the batch step's SLURM_*).
EnvSource DetectSource(const EnvVars& v) {
  if (StartedByLauncher(v)) return EnvSource::kEnvVars;
  if (v.count("OMPI_COMM_WORLD_RANK")) return EnvSource::kOpenMpi;
  // Slurm's own PMI (srun --mpi=pmi2) sets PMI_RANK too, but never MPI_LOCALRANKID.
  if (v.count("PMI_RANK") && (v.count("MPI_LOCALRANKID") || !IsSlurmStep(v))) return EnvSource::kMpich;
  if (IsSlurmStep(v)) return EnvSource::kSlurm;
  if (!v.count("RANK") && !v.count("WORLD_SIZE") && (v.count("PET_NODE_RANK") || v.count("PET_NNODES"))) {
    return EnvSource::kKubeflow;
  }
  return EnvSource::kEnvVars;
}

// ---- Slurm's own ways ------------------------------------------------------------------------------

bool HostResolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (list != nullptr) ::freeaddrinfo(list);
  return rc == 0;
}

// Slurm starts task 0 on the first node of the step, so the store is there: the first host of
// SLURM_STEP_NODELIST (what `scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n1` prints), as the
// common recipes take it. SLURM_LAUNCH_NODE_IPADDR is where srun runs, which under salloc on a login
// node is not a node of the job at all: only a fallback when the first host's name does not resolve.
std::string SlurmStoreHost(VarReader& r) {
  auto launch_node = r.Get("SLURM_LAUNCH_NODE_IPADDR");
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    auto list = r.Get(name);
    if (!list) continue;
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(*list);
    if (!hosts.ok()) {
      r.problems.push_back(absl::StrCat(name, "='", *list, "': ", hosts.status().message()));
      return "";
    }
    if (HostResolves(hosts->front())) return hosts->front();
    static std::atomic<bool> said{false};  // ReadEngineEnv runs more than once in a process
    if (r.Get("SLURM_LOCALID").value_or("0") == "0" && !said.exchange(true)) {  // one line per node
      std::fprintf(stderr, "tinyddp: the first host of %s (%s, where task 0 runs) does not resolve here; %s (export "
                   "MASTER_ADDR=<an address of %s> to choose)\n", name, hosts->front().c_str(),
                   launch_node ? absl::StrCat("using SLURM_LAUNCH_NODE_IPADDR=", *launch_node,
                                              ", where srun runs, as the store's address").c_str()
                               : "and SLURM_LAUNCH_NODE_IPADDR is not set either",
                   hosts->front().c_str());
    }
    break;
  }
  if (launch_node) return *launch_node;
  r.problems.push_back("MASTER_ADDR is missing, and neither the first host of SLURM_STEP_NODELIST nor "
                       "SLURM_LAUNCH_NODE_IPADDR gives an address");
  return "";
}

// Slurm writes tasks per node compressed: "4(x2),3" means nodes 0 and 1 run 4 tasks, node 2 runs 3.
std::optional<std::vector<int>> ParseTasksPerNode(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int count = 0, repeat = 1;
    const size_t paren = part.find("(x");
    if (!absl::SimpleAtoi(part.substr(0, paren), &count)) return std::nullopt;
    if (paren != absl::string_view::npos &&
        (!absl::ConsumeSuffix(&part, ")") || !absl::SimpleAtoi(part.substr(paren + 2), &repeat) || repeat < 1 ||
         repeat > (1 << 20))) {
      return std::nullopt;
    }
    out.insert(out.end(), repeat, count);
  }
  return out;
}

// SLURM_LOCALID, and the node's entry of the first task list set.
void ReadSlurmLocal(VarReader& r, Reading& out) {
  WorkerEnv& env = out.env;
  env.local_rank = r.Int(out.local_rank_var).value_or(0);
  out.local_size_var = "";
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (out.local_size_var.empty() && r.Has(name)) out.local_size_var = name;
  }
  if (out.local_size_var.empty()) {
    r.problems.push_back("SLURM_STEP_TASKS_PER_NODE (or SLURM_NTASKS_PER_NODE) is missing");
    return;
  }
  const std::string text = r.Get(out.local_size_var).value_or("");
  const std::optional<std::vector<int>> counts = ParseTasksPerNode(text);
  if (!counts || counts->empty()) {
    r.problems.push_back(
        absl::StrCat(out.local_size_var, "='", text, "' is not a Slurm task list like '4' or '4(x2),3'"));
    return;
  }
  // One entry per node, except --ntasks-per-node, which is one number for all nodes.
  int node = 0;
  (void)absl::SimpleAtoi(r.Get("SLURM_NODEID").value_or("0"), &node);  // checked with the node index
  env.local_world_size = (*counts)[std::min<size_t>(counts->size() == 1 ? 0 : node, counts->size() - 1)];
}

// ---- One reader for every engine -------------------------------------------------------------------

// PyTorchJob (since Kubeflow 1.7) and Kubeflow Trainer give each pod torchrun's settings as PET_*.
// RANK / PET_NODE_RANK number pods: a pod of several processes must start them through `launch`.
void CheckOneProcessPerPod(VarReader& r, const std::string& rank_var) {
  int n = 0;
  if (absl::SimpleAtoi(r.Get("PET_NPROC_PER_NODE").value_or("1"), &n) && n != 1) {
    r.contradictions.push_back(absl::StrCat(
        "PET_NPROC_PER_NODE=", n, " says this pod runs ", n, " processes, but ", rank_var, " numbers pods, not "
        "processes: start the pod's processes with `launch --nnodes=$PET_NNODES --node_rank=$PET_NODE_RANK "
        "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT --nproc_per_node=", n, " PROGRAM`"));
  }
}

// PET_NNODES: torchrun's number of nodes, or an elastic "MIN:MAX" accepted as a fixed count only ("2:2").
int PetNodes(VarReader& r) {
  const std::optional<std::string> nnodes = r.Get("PET_NNODES");
  std::pair<std::string, std::string> range = absl::StrSplit(nnodes.value_or(""), absl::MaxSplits(':', 1));
  int nodes = 1;
  if (!nnodes) {
    r.problems.push_back("PET_NNODES is missing");
  } else if (!range.second.empty() && range.second != range.first) {
    r.problems.push_back(absl::StrCat("PET_NNODES=", *nnodes, " is an elastic range; tinyddp's jobs have a fixed "
                                      "number of nodes (give the job as many minimum as maximum replicas)"));
  } else if (!absl::SimpleAtoi(range.first, &nodes)) {
    r.problems.push_back(absl::StrCat("PET_NNODES='", *nnodes, "' is not an integer"));
  }
  return nodes;
}

Reading Read(EnvSource source, VarReader& r) {
  const Engine& engine = EngineOf(source);
  Reading out{{}, engine.rank, engine.size, engine.local_rank, engine.local_size};
  WorkerEnv& env = out.env;
  env.source = EnvSourceName(source);
  // A Slurm step may run fewer tasks than the allocation: the step's own count wins.
  if (source == EnvSource::kSlurm && !r.Has(out.size_var)) out.size_var = "SLURM_NTASKS";
  env.rank = r.Int(out.rank_var).value_or(0);
  env.world_size = source == EnvSource::kKubeflow ? PetNodes(r) : r.Int(out.size_var).value_or(1);

  // The store: MASTER_ADDR / MASTER_PORT when set, else what the engine implies (a Slurm step's first node
  // and job id; torchrun's PET_MASTER_*). MPI implies nothing: the user passes them (mpirun -x).
  const bool pod = source == EnvSource::kKubeflow || (source == EnvSource::kEnvVars && (r.Has("PET_NODE_RANK") ||
                                                                                        r.Has("PET_NNODES")));
  std::optional<std::string> addr = r.Get("MASTER_ADDR");
  if (!addr && source == EnvSource::kSlurm) addr = SlurmStoreHost(r);
  if (!addr) addr = r.Get("PET_MASTER_ADDR");
  if (!addr) {
    r.problems.push_back(pod ? "MASTER_ADDR is missing (and so is PET_MASTER_ADDR)" : "MASTER_ADDR is missing");
  }
  env.master_addr = StoreHost(addr.value_or(""));
  if (source != EnvSource::kSlurm || r.Has("MASTER_PORT")) {
    env.master_port = r.Int(r.Has("MASTER_PORT") || !r.Has("PET_MASTER_PORT") ? "MASTER_PORT" : "PET_MASTER_PORT")
                          .value_or(0);
  } else if (auto job = r.OptionalInt("SLURM_JOB_ID")) {
    env.master_port = 20000 + *job % 20000;  // distinct jobs sharing a node rarely collide
  } else {
    r.problems.push_back("MASTER_PORT is missing (and SLURM_JOB_ID is not set to derive one)");
  }

  // The processes on this machine. Without the engine's local variables: every rank, when the store is
  // on loopback (no other machine could reach it); else one process per machine (local rank 0 of 1,
  // node rank RANK), as PyTorchJob and Volcano start one per pod.
  if (source == EnvSource::kSlurm) {
    ReadSlurmLocal(r, out);
  } else if (!out.local_rank_var.empty() && (r.Has(out.local_rank_var) || r.Has(out.local_size_var))) {
    env.local_rank = r.Int(out.local_rank_var).value_or(0);
    env.local_world_size = r.Int(out.local_size_var).value_or(1);
  } else if (env.master_addr == "localhost" || absl::StartsWith(env.master_addr, "127.") || env.master_addr == "::1") {
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  } else if (pod) {
    CheckOneProcessPerPod(r, out.rank_var);
    if (source == EnvSource::kEnvVars) {
      if (auto node = r.OptionalInt("PET_NODE_RANK")) r.Agree("RANK", env.rank, "PET_NODE_RANK", *node);
      int nodes = 0;
      if (absl::SimpleAtoi(r.Get("PET_NNODES").value_or(""), &nodes)) {
        r.Agree("WORLD_SIZE", env.world_size, "PET_NNODES", nodes);
      }
    }
  }
  const std::optional<int> node = *engine.node != '\0' ? r.OptionalInt(engine.node) : std::nullopt;
  env.group_rank = node.value_or(env.local_world_size > 0 ? env.rank / env.local_world_size : 0);
  return out;
}

// ---- Checks ----------------------------------------------------------------------------------------

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE exported beside an engine's own (a job script's
// `export RANK=$SLURM_PROCID`, or a stale `export WORLD_SIZE=8`) must say what the engine says.
void CheckEnvVarsAgree(VarReader& r, const Reading& engine) {
  const std::pair<const char*, std::pair<const std::string*, int>> pairs[] = {
      {"RANK", {&engine.rank_var, engine.env.rank}},
      {"WORLD_SIZE", {&engine.size_var, engine.env.world_size}},
      {"LOCAL_RANK", {&engine.local_rank_var, engine.env.local_rank}},
      {"LOCAL_WORLD_SIZE", {&engine.local_size_var, engine.env.local_world_size}},
  };
  for (const auto& [name, theirs] : pairs) {
    if (theirs.first->empty() || !r.Has(*theirs.first)) continue;  // implied, not read
    if (auto ours = r.OptionalInt(name)) r.Agree(name, *ours, *theirs.first, theirs.second);
  }
}

void CheckConsistency(VarReader& r, const Reading& reading) {
  if (!r.problems.empty()) return;  // ranges of values that failed to parse would only add noise
  const WorkerEnv& env = reading.env;
  const std::string& size_var = reading.size_var;
  if (env.world_size < 1) r.problems.push_back(absl::StrCat(size_var, "=", env.world_size, " must be at least 1"));
  if (env.rank < 0 || env.rank >= env.world_size) {
    r.problems.push_back(
        absl::StrCat(reading.rank_var, "=", env.rank, " must be in [0, ", size_var, "=", env.world_size, ")"));
  }
  if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
    r.problems.push_back(absl::StrCat("the local world size (", env.local_world_size, ") must be in [1, ",
                                      size_var, "=", env.world_size, "]"));
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    r.problems.push_back(absl::StrCat(reading.local_rank_var.empty() ? "the local rank" : reading.local_rank_var,
                                      "=", env.local_rank, " must be in [0, local world size ",
                                      env.local_world_size, ")"));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    r.problems.push_back(absl::StrCat("MASTER_PORT=", env.master_port,
                                      " must be in [1, 65535] (every rank must name the same, fixed port)"));
  }
}

}  // namespace

const char* EnvSourceName(EnvSource source) { return EngineOf(source).name; }

bool IsEngineRank(const EnvVars& vars) {
  auto has = [&](const char* name) { return vars.count(name) > 0; };
  return IsWorker(vars) || IsSlurmStep(vars) || has("OMPI_COMM_WORLD_RANK") || has("PMI_RANK") ||
         has("PET_NODE_RANK") || has("PET_NNODES");
}

absl::StatusOr<WorkerEnv> ReadEngineEnv(const EnvVars& vars) {
  if (!IsEngineRank(vars)) {
    return absl::NotFoundError(
        "this process was not started as a rank of a job: none of RANK/WORLD_SIZE (env://), a Slurm step's "
        "SLURM_PROCID, OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH) or PET_NODE_RANK (Kubeflow) is set; "
        "start it with `launch --nproc_per_node=N PROGRAM`, srun, mpirun or mpiexec");
  }
  const EnvSource source = DetectSource(vars);
  // Plain env:// (a launcher's workers, ranks started by hand): nothing to translate, the core reads it.
  // A pod's (PET_* beside RANK/WORLD_SIZE) is read below: its variables must agree with Kubeflow's.
  if (source == EnvSource::kEnvVars && IsWorker(vars) && !vars.count("PET_NODE_RANK") && !vars.count("PET_NNODES")) {
    return ReadWorkerEnv(vars);
  }
  VarReader r(vars);
  const Reading reading = Read(source, r);
  if (source != EnvSource::kEnvVars) CheckEnvVarsAgree(r, reading);
  CheckConsistency(r, reading);
  const char* why = StartedByLauncher(vars) ? "a launcher started this process (TINYDDP_LAUNCHER_STORE or "
                                              "TORCHELASTIC_RUN_ID)"
                                            : EngineOf(source).why;
  const std::string header = absl::StrCat("cannot tell this process's place in the job from its ",
                                          EnvSourceName(source), " variables (read because ", why, "):\n  - ");
  if (!r.contradictions.empty()) {
    r.contradictions.insert(r.contradictions.end(), r.problems.begin(), r.problems.end());
    return absl::InvalidArgumentError(absl::StrCat(
        header, absl::StrJoin(r.contradictions, "\n  - "),
        "\nFix: these sources disagree. Variables exported in a job script (RANK=..., WORLD_SIZE=...) are not "
        "needed under ", EnvSourceName(source), ", which tinyddp reads itself: remove them, or make them say the "
        "same; to run several processes per node or pod, start them with `launch`."));
  }
  if (!r.problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(header, absl::StrJoin(r.problems, "\n  - "), "\nFix: ", EngineOf(source).fix, "."));
  }
  WorkerEnv env = reading.env;
  RETURN_IF_ERROR(ReadLauncherVariables(vars, env));
  return env;
}

std::vector<std::pair<std::string, std::string>> EnvVarsOf(const WorkerEnv& env) {
  return {{"RANK", std::to_string(env.rank)},
          {"WORLD_SIZE", std::to_string(env.world_size)},
          {"LOCAL_RANK", std::to_string(env.local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(env.local_world_size)},
          {"GROUP_RANK", std::to_string(env.group_rank)},
          {"MASTER_ADDR", env.master_addr},
          {"MASTER_PORT", std::to_string(env.master_port)}};
}

absl::StatusOr<std::string> UseClusterEngine() {
  const EnvVars vars = CurrentEnvironment();
  if (!IsEngineRank(vars)) return std::string("env://");  // not a rank: the program may start its own
  ASSIGN_OR_RETURN(const WorkerEnv env, ReadEngineEnv(vars));
  for (const auto& [name, value] : EnvVarsOf(env)) ::setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  return env.source;
}

// "gpu[01-04,07]": a list at top level is split on the commas outside brackets; each item is expanded
// from its first bracket on, the rest of the item (which may hold more brackets) recursively.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view hostlist) {
  constexpr size_t kMaxHosts = size_t{1} << 20;
  std::vector<std::string> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= hostlist.size(); ++i) {
    const char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return absl::InvalidArgumentError("a ']' without its '['");
    if (c == ',' && depth == 0) {
      if (i > start) items.emplace_back(hostlist.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return absl::InvalidArgumentError("a '[' without its ']'");
  if (items.empty()) return absl::InvalidArgumentError("no host in the list");
  std::vector<std::string> hosts;
  for (const std::string& item : items) {
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    absl::StatusOr<std::vector<std::string>> tails = std::vector<std::string>{""};
    if (close + 1 < item.size()) tails = ExpandHostlist(item.substr(close + 1));
    if (!tails.ok()) return tails.status();
    for (absl::string_view range : absl::StrSplit(item.substr(open + 1, close - open - 1), ',')) {
      std::pair<absl::string_view, absl::string_view> bounds = absl::StrSplit(range, absl::MaxSplits('-', 1));
      if (bounds.second.empty()) bounds.second = bounds.first;
      uint64_t lo = 0, hi = 0;
      const bool digits = !bounds.first.empty() && absl::c_all_of(bounds.first, absl::ascii_isdigit) &&
                          absl::c_all_of(bounds.second, absl::ascii_isdigit);
      if (!digits || !absl::SimpleAtoi(bounds.first, &lo) || !absl::SimpleAtoi(bounds.second, &hi) || hi < lo) {
        return absl::InvalidArgumentError(absl::StrCat("'[", range, "]' is not a range like 01-04 or 7"));
      }
      if ((hi - lo + 1) * tails->size() > kMaxHosts - hosts.size()) {
        return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxHosts, " hosts"));
      }
      for (uint64_t n = lo; n <= hi; ++n) {
        std::string number = std::to_string(n);
        if (number.size() < bounds.first.size()) number.insert(0, bounds.first.size() - number.size(), '0');
        for (const std::string& tail : *tails) hosts.push_back(absl::StrCat(item.substr(0, open), number, tail));
      }
    }
  }
  return hosts;
}

}  // namespace tinyddp::dist
