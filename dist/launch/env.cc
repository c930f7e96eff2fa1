// WorkerEnv parsing: see env.h. Each engine has a reader that fills a Reading (the WorkerEnv and the
// names of the variables each value came from) and notes every problem instead of stopping at the
// first, so one run tells the user everything to fix.
#include "dist/launch/env.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dist/store/store_secret.h"

extern char** environ;

namespace tinyddp::dist {
namespace {

// Looks variables up and collects problems ("WORLD_SIZE is missing", "RANK='x' is not an integer") and
// contradictions ("RANK=3 but SLURM_PROCID=1"), which have a fix of their own.
class VarReader {
 public:
  explicit VarReader(const EnvVars& vars) : vars_(vars) {}

  bool Has(const std::string& name) const { return vars_.count(name) > 0; }
  std::optional<std::string> Str(const std::string& name) {
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) {
      problems.push_back(name + " is missing");
      return std::nullopt;
    }
    return it->second;
  }
  std::optional<int> Int(const std::string& name) {
    auto text = Str(name);
    if (!text) return std::nullopt;
    return ParseInt(name, *text);
  }
  // Absent is fine (nullopt, no problem); present but malformed is a problem.
  std::optional<int> OptionalInt(const std::string& name) {
    if (!Has(name)) return std::nullopt;
    return ParseInt(name, vars_.at(name));
  }
  std::optional<std::string> OptionalStr(const std::string& name) const {
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) return std::nullopt;
    return it->second;
  }
  // Two sources of one fact must agree.
  void Agree(const std::string& name, int value, const std::string& other_name, int other_value) {
    if (value != other_value) {
      contradictions.push_back(absl::StrCat(name, "=", value, " but ", other_name, "=", other_value));
    }
  }

  std::vector<std::string> problems;
  std::vector<std::string> contradictions;

 private:
  std::optional<int> ParseInt(const std::string& name, const std::string& text) {
    int v = 0;
    if (!absl::SimpleAtoi(text, &v)) {
      problems.push_back(absl::StrCat(name, "='", text, "' is not an integer"));
      return std::nullopt;
    }
    return v;
  }
  const EnvVars& vars_;
};

// What one engine's variables say about this process, and the variables that said it (for messages).
struct Reading {
  WorkerEnv env;
  std::string rank_var = "RANK", size_var = "WORLD_SIZE", local_rank_var = "LOCAL_RANK",
              local_size_var = "LOCAL_WORLD_SIZE";
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

// ---- The store's address ---------------------------------------------------------------------------

bool IsLoopback(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1";
}

// Ranks given without LOCAL_*: all of them on this machine when the store is on loopback (no other
// machine could reach it); otherwise one process per machine, as PyTorchJob and Volcano start one per pod.
bool AllRanksOnThisMachine(const std::string& master_addr) { return IsLoopback(master_addr); }

// MASTER_ADDR / MASTER_PORT when set, else the variable an engine implies them with (nullptr: none).
std::string StoreAddr(VarReader& r, const char* implied) {
  if (auto addr = r.OptionalStr("MASTER_ADDR")) return *addr;
  if (implied != nullptr) {
    if (auto addr = r.OptionalStr(implied)) return *addr;
  }
  const bool pod = implied != nullptr && (r.Has("PET_NODE_RANK") || r.Has("PET_NNODES"));
  r.problems.push_back(pod ? absl::StrCat("MASTER_ADDR is missing (and so is ", implied, ")")
                           : std::string("MASTER_ADDR is missing"));
  return "";
}
int StorePort(VarReader& r, const char* implied) {
  if (r.Has("MASTER_PORT") || implied == nullptr || !r.Has(implied)) return r.Int("MASTER_PORT").value_or(0);
  return r.Int(implied).value_or(0);
}

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
std::string SlurmStoreHost(VarReader& r, int local_rank) {
  auto launch_node = r.OptionalStr("SLURM_LAUNCH_NODE_IPADDR");
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    auto list = r.OptionalStr(name);
    if (!list) continue;
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(*list);
    if (!hosts.ok()) {
      r.problems.push_back(absl::StrCat(name, "='", *list, "': ", hosts.status().message()));
      return "";
    }
    const std::string& first = hosts->front();
    if (HostResolves(first)) return first;
    static std::atomic<bool> said{false};  // ReadWorkerEnv runs more than once in a process
    if (local_rank == 0 && !said.exchange(true)) {
      std::fprintf(stderr,
                   "tinyddp: the first host of %s (%s, where task 0 runs) does not resolve here; %s (export "
                   "MASTER_ADDR=<an address of %s> to choose)\n",
                   name, first.c_str(),
                   launch_node ? absl::StrCat("using SLURM_LAUNCH_NODE_IPADDR=", *launch_node,
                                              ", where srun runs, as the store's address").c_str()
                               : "and SLURM_LAUNCH_NODE_IPADDR is not set either",
                   first.c_str());
    }
    break;
  }
  if (launch_node) return *launch_node;
  r.problems.push_back(
      "MASTER_ADDR is missing, and neither the first host of SLURM_STEP_NODELIST nor SLURM_LAUNCH_NODE_IPADDR "
      "gives an address");
  return "";
}

// ---- One reader per engine -------------------------------------------------------------------------

// PyTorchJob (since Kubeflow 1.7) and Kubeflow Trainer give each pod torchrun's settings as PET_*.
// RANK / PET_NODE_RANK number pods: a pod of several processes must start them through `launch`.
void CheckOneProcessPerPod(VarReader& r, const std::string& rank_var) {
  int n = 0;
  auto text = r.OptionalStr("PET_NPROC_PER_NODE");
  if (text && absl::SimpleAtoi(*text, &n) && n != 1) {
    r.contradictions.push_back(absl::StrCat(
        "PET_NPROC_PER_NODE=", n, " says this pod runs ", n, " processes, but ", rank_var, " numbers pods, not "
        "processes: start the pod's processes with `launch --nnodes=$PET_NNODES --node_rank=$PET_NODE_RANK "
        "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT --nproc_per_node=", n, " PROGRAM`"));
  }
}

// launch, torchrun, PyTorchJob, Volcano, by hand.
Reading ReadEnvVars(VarReader& r) {
  Reading out;
  WorkerEnv& env = out.env;
  env.source = EnvSource::kEnvVars;
  env.rank = r.Int("RANK").value_or(0);
  env.world_size = r.Int("WORLD_SIZE").value_or(1);
  env.master_addr = StoreAddr(r, "PET_MASTER_ADDR");
  env.master_port = StorePort(r, "PET_MASTER_PORT");
  auto local_rank = r.OptionalInt("LOCAL_RANK");
  auto local_world_size = r.OptionalInt("LOCAL_WORLD_SIZE");
  if (!local_rank && !local_world_size) {
    if (AllRanksOnThisMachine(env.master_addr)) {
      env.local_rank = env.rank;
      env.local_world_size = env.world_size;
    } else {  // one process per machine (pod): local rank 0 of 1, node rank RANK
      env.local_rank = 0;
      env.local_world_size = 1;
      CheckOneProcessPerPod(r, "RANK");
      if (auto node = r.OptionalInt("PET_NODE_RANK")) r.Agree("RANK", env.rank, "PET_NODE_RANK", *node);
      int nodes = 0;
      auto nnodes = r.OptionalStr("PET_NNODES");
      if (nnodes && absl::SimpleAtoi(*nnodes, &nodes)) r.Agree("WORLD_SIZE", env.world_size, "PET_NNODES", nodes);
    }
  } else {
    if (!r.Has("LOCAL_RANK")) r.problems.push_back("LOCAL_RANK is missing (LOCAL_WORLD_SIZE is set)");
    if (!r.Has("LOCAL_WORLD_SIZE")) r.problems.push_back("LOCAL_WORLD_SIZE is missing (LOCAL_RANK is set)");
    env.local_rank = local_rank.value_or(0);
    env.local_world_size = local_world_size.value_or(1);
  }
  auto group_rank = r.OptionalInt("GROUP_RANK");
  env.group_rank = group_rank.value_or(env.local_world_size > 0 ? env.rank / env.local_world_size : 0);
  return out;
}

// Kubeflow Trainer's pods carry torchrun's settings only: with PET_NPROC_PER_NODE=1 the pod is the rank.
Reading ReadKubeflow(VarReader& r) {
  Reading out{.rank_var = "PET_NODE_RANK", .size_var = "PET_NNODES", .local_rank_var = "", .local_size_var = ""};
  WorkerEnv& env = out.env;
  env.source = EnvSource::kKubeflow;
  env.rank = r.Int("PET_NODE_RANK").value_or(0);
  if (auto nnodes = r.Str("PET_NNODES")) {
    std::pair<std::string, std::string> range = absl::StrSplit(*nnodes, absl::MaxSplits(':', 1));
    if (!range.second.empty() && range.second != range.first) {
      r.problems.push_back(absl::StrCat("PET_NNODES=", *nnodes, " is an elastic range; tinyddp's jobs have a fixed "
                                        "number of nodes (give the job as many minimum as maximum replicas)"));
    } else if (!absl::SimpleAtoi(range.first, &env.world_size)) {
      r.problems.push_back(absl::StrCat("PET_NNODES='", *nnodes, "' is not an integer"));
    }
  }
  CheckOneProcessPerPod(r, "PET_NODE_RANK");
  env.local_rank = 0;
  env.local_world_size = 1;
  env.group_rank = env.rank;
  env.master_addr = StoreAddr(r, "PET_MASTER_ADDR");
  env.master_port = StorePort(r, "PET_MASTER_PORT");
  return out;
}

// Slurm writes tasks per node compressed: "4(x2),3" means nodes 0 and 1 run 4 tasks, node 2 runs 3.
std::optional<std::vector<int>> ParseTasksPerNode(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int count = 0, repeat = 1;
    size_t paren = part.find("(x");
    absl::string_view number = part.substr(0, paren);
    if (!absl::SimpleAtoi(number, &count)) return std::nullopt;
    if (paren != absl::string_view::npos) {
      absl::string_view rest = part.substr(paren + 2);
      if (rest.empty() || rest.back() != ')' || !absl::SimpleAtoi(rest.substr(0, rest.size() - 1), &repeat)) {
        return std::nullopt;
      }
    }
    for (int i = 0; i < repeat; ++i) out.push_back(count);
  }
  return out;
}

Reading ReadSlurm(VarReader& r) {
  Reading out{.rank_var = "SLURM_PROCID", .local_rank_var = "SLURM_LOCALID"};
  WorkerEnv& env = out.env;
  env.source = EnvSource::kSlurm;
  env.rank = r.Int("SLURM_PROCID").value_or(0);
  // A job step (srun) may run fewer tasks than the allocation: prefer the step's own count.
  out.size_var = r.Has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  env.world_size = r.Int(out.size_var).value_or(1);
  env.local_rank = r.Int("SLURM_LOCALID").value_or(0);
  env.group_rank = r.OptionalInt("SLURM_NODEID").value_or(0);
  out.local_size_var = "";
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (r.Has(name)) {
      out.local_size_var = name;
      break;
    }
  }
  if (out.local_size_var.empty()) {
    r.problems.push_back("SLURM_STEP_TASKS_PER_NODE (or SLURM_NTASKS_PER_NODE) is missing");
  } else {
    auto text = r.Str(out.local_size_var);
    auto counts = text ? ParseTasksPerNode(*text) : std::nullopt;
    if (!counts || counts->empty()) {
      r.problems.push_back(absl::StrCat(out.local_size_var, "='", text.value_or(""),
                                        "' is not a Slurm task list like '4' or '4(x2),3'"));
    } else {
      // One entry per node, except --ntasks-per-node, which is one number for all nodes.
      env.local_world_size = counts->size() == 1 ? (*counts)[0]
                             : env.group_rank < static_cast<int>(counts->size()) ? (*counts)[env.group_rank]
                                                                                  : (*counts).back();
    }
  }
  env.master_addr = r.Has("MASTER_ADDR") ? StoreAddr(r, nullptr) : SlurmStoreHost(r, env.local_rank);
  if (r.Has("MASTER_PORT")) {
    env.master_port = r.Int("MASTER_PORT").value_or(0);
  } else if (auto job = r.OptionalInt("SLURM_JOB_ID")) {
    env.master_port = 20000 + *job % 20000;  // distinct jobs sharing a node rarely collide
  } else {
    r.problems.push_back("MASTER_PORT is missing (and SLURM_JOB_ID is not set to derive one)");
  }
  return out;
}

// mpirun maps ranks to nodes in blocks by default, and neither MPI exports the node's index.
int NodeOf(const WorkerEnv& env) { return env.local_world_size > 0 ? env.rank / env.local_world_size : 0; }

Reading ReadOpenMpi(VarReader& r) {
  Reading out{.rank_var = "OMPI_COMM_WORLD_RANK", .size_var = "OMPI_COMM_WORLD_SIZE",
              .local_rank_var = "OMPI_COMM_WORLD_LOCAL_RANK", .local_size_var = "OMPI_COMM_WORLD_LOCAL_SIZE"};
  WorkerEnv& env = out.env;
  env.source = EnvSource::kOpenMpi;
  env.rank = r.Int(out.rank_var).value_or(0);
  env.world_size = r.Int(out.size_var).value_or(1);
  env.local_rank = r.Int(out.local_rank_var).value_or(0);
  env.local_world_size = r.Int(out.local_size_var).value_or(1);
  env.group_rank = NodeOf(env);
  // MPI does not tell a rank where rank 0 runs, so the user passes it explicitly.
  env.master_addr = StoreAddr(r, nullptr);
  env.master_port = StorePort(r, nullptr);
  return out;
}

// MPICH's and Intel MPI's process manager, Hydra (mpiexec).
Reading ReadMpich(VarReader& r) {
  Reading out{.rank_var = "PMI_RANK", .size_var = "PMI_SIZE", .local_rank_var = "MPI_LOCALRANKID",
              .local_size_var = "MPI_LOCALNRANKS"};
  WorkerEnv& env = out.env;
  env.source = EnvSource::kMpich;
  env.rank = r.Int(out.rank_var).value_or(0);
  env.world_size = r.Int(out.size_var).value_or(1);
  env.master_addr = StoreAddr(r, nullptr);
  env.master_port = StorePort(r, nullptr);
  if (r.Has(out.local_rank_var) || r.Has(out.local_size_var)) {
    env.local_rank = r.Int(out.local_rank_var).value_or(0);
    env.local_world_size = r.Int(out.local_size_var).value_or(1);
  } else if (AllRanksOnThisMachine(env.master_addr)) {  // an old Hydra without the local variables
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  }
  env.group_rank = NodeOf(env);
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
    r.problems.push_back(absl::StrCat(reading.local_rank_var, "=", env.local_rank,
                                      " must be in [0, local world size ", env.local_world_size, ")"));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    r.problems.push_back(absl::StrCat("MASTER_PORT=", env.master_port,
                                      " must be in [1, 65535] (every rank must name the same, fixed port)"));
  }
}

const char* WhyThisSource(EnvSource source, const EnvVars& v) {
  switch (source) {
    case EnvSource::kEnvVars:
      return StartedByLauncher(v) ? "a launcher started this process (TINYDDP_LAUNCHER_STORE or TORCHELASTIC_RUN_ID)"
                                  : "RANK or WORLD_SIZE is set";
    case EnvSource::kSlurm: return "SLURM_PROCID of a job step is set";
    case EnvSource::kOpenMpi: return "OMPI_COMM_WORLD_RANK is set";
    case EnvSource::kMpich: return "PMI_RANK is set";
    case EnvSource::kKubeflow: return "PET_NODE_RANK or PET_NNODES is set";
  }
  return "";
}

const char* FixHint(EnvSource source) {
  switch (source) {
    case EnvSource::kEnvVars:
      return "start the program with `launch --nproc_per_node=N PROGRAM` (it sets all of them), or export RANK, "
             "WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself (plus LOCAL_RANK and LOCAL_WORLD_SIZE when "
             "several ranks share a machine whose MASTER_ADDR is not a loopback address)";
    case EnvSource::kSlurm:
      return "run the program with `srun` inside an allocation (srun sets the SLURM_* variables); export "
             "MASTER_ADDR=<host of task 0> and MASTER_PORT if the node list gives no usable address";
    case EnvSource::kOpenMpi:
      return "pass the store's address to every rank: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 "
             "PROGRAM";
    case EnvSource::kMpich:
      return "pass the store's address to every rank: mpiexec -genv MASTER_ADDR <host of rank 0> -genv "
             "MASTER_PORT 29500 PROGRAM";
    case EnvSource::kKubeflow:
      return "run one process per pod (nprocPerNode: 1), or start the pod's processes with `launch` (its "
             "--nnodes, --node_rank, --master_addr and --master_port from PET_*)";
  }
  return "";
}

}  // namespace

const char* EnvSourceName(EnvSource source) {
  switch (source) {
    case EnvSource::kEnvVars: return "env://";
    case EnvSource::kSlurm: return "Slurm";
    case EnvSource::kOpenMpi: return "Open MPI";
    case EnvSource::kMpich: return "MPICH (Hydra)";
    case EnvSource::kKubeflow: return "Kubeflow (PET_*)";
  }
  return "?";
}

std::string WorkerEnv::DebugString() const {
  return absl::StrCat("rank ", rank, "/", world_size, " (local ", local_rank, "/", local_world_size, ", node ",
                      group_rank, ") store ", master_addr, ":", master_port,
                      launcher_hosts_store ? " hosted by the launcher" : "", " [", EnvSourceName(source), "]");
}

EnvVars CurrentEnvironment() {
  EnvVars vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return vars;
}

bool IsWorker(const EnvVars& vars) {
  auto has = [&](const char* name) { return vars.count(name) > 0; };
  return has("RANK") || has("WORLD_SIZE") || IsSlurmStep(vars) || has("OMPI_COMM_WORLD_RANK") || has("PMI_RANK") ||
         has("PET_NODE_RANK") || has("PET_NNODES");
}

bool IsWorker() { return IsWorker(CurrentEnvironment()); }

int RestartCount() {
  const char* text = std::getenv(kRestartCountEnv);
  int n = 0;
  return text != nullptr && absl::SimpleAtoi(text, &n) && n > 0 ? n : 0;
}

absl::StatusOr<WorkerEnv> ReadWorkerEnv(const EnvVars& vars) {
  if (!IsWorker(vars)) {
    return absl::NotFoundError(
        "this process was not started as a rank of a job: none of RANK/WORLD_SIZE (env://), a Slurm step's "
        "SLURM_PROCID, OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH) or PET_NODE_RANK (Kubeflow) is set; "
        "start it with `launch --nproc_per_node=N PROGRAM`, srun, mpirun or mpiexec");
  }
  VarReader r(vars);
  const EnvSource source = DetectSource(vars);
  Reading reading;
  switch (source) {
    case EnvSource::kEnvVars: reading = ReadEnvVars(r); break;
    case EnvSource::kSlurm: reading = ReadSlurm(r); break;
    case EnvSource::kOpenMpi: reading = ReadOpenMpi(r); break;
    case EnvSource::kMpich: reading = ReadMpich(r); break;
    case EnvSource::kKubeflow: reading = ReadKubeflow(r); break;
  }
  if (source != EnvSource::kEnvVars) CheckEnvVarsAgree(r, reading);
  CheckConsistency(r, reading);
  const std::string header = absl::StrCat("cannot tell this process's place in the job from its ",
                                          EnvSourceName(source), " variables (read because ",
                                          WhyThisSource(source, vars), "):\n  - ");
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
        absl::StrCat(header, absl::StrJoin(r.problems, "\n  - "), "\nFix: ", FixHint(source), "."));
  }
  WorkerEnv env = reading.env;
  auto hosted = vars.find(kLauncherStoreEnv);
  env.launcher_hosts_store = hosted != vars.end() && hosted->second == "1";
  auto restart = vars.find(kRestartCountEnv);
  if (restart != vars.end() && !absl::SimpleAtoi(restart->second, &env.restart_count)) {
    return absl::InvalidArgumentError(absl::StrCat(kRestartCountEnv, "=", restart->second,
                                                   " is not a number; it is set by the launcher (0, 1, ...)"));
  }
  return env;
}

absl::StatusOr<WorkerEnv> ReadWorkerEnv() { return ReadWorkerEnv(CurrentEnvironment()); }

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

absl::StatusOr<std::vector<std::string>> LaunchFlagsFromEnvironment(const EnvVars& vars) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() || it->second.empty() ? std::nullopt : std::optional<std::string>(it->second);
  };
  std::vector<std::string> flags;
  const bool any_pet = absl::c_any_of(vars, [](const auto& kv) { return absl::StartsWith(kv.first, "PET_"); });
  if (!any_pet) return flags;
  // Each value as launch's flag; integers are checked here so an error names the variable.
  auto add = [&](const char* var, const char* flag, const std::string& value, bool integer) -> absl::Status {
    int n = 0;
    if (integer && !absl::SimpleAtoi(value, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(var, "='", value, "' is not an integer (launch reads it as ",
                                                     flag, ", as torchrun does)"));
    }
    flags.push_back(absl::StrCat(flag, "=", value));
    return absl::OkStatus();
  };
  if (auto nnodes = get("PET_NNODES")) {
    std::pair<std::string, std::string> range = absl::StrSplit(*nnodes, absl::MaxSplits(':', 1));
    if (!range.second.empty() && range.second != range.first) {
      return absl::InvalidArgumentError(absl::StrCat("PET_NNODES=", *nnodes, " is an elastic range; tinyddp's jobs "
                                                     "have a fixed number of nodes (as many minimum as maximum)"));
    }
    if (absl::Status s = add("PET_NNODES", "--nnodes", range.first, true); !s.ok()) return s;
  }
  if (auto v = get("PET_NODE_RANK")) {
    if (absl::Status s = add("PET_NODE_RANK", "--node_rank", *v, true); !s.ok()) return s;
  }
  if (auto v = get("PET_NPROC_PER_NODE")) flags.push_back("--nproc_per_node=" + *v);
  // The store: MASTER_ADDR/PORT over PET_MASTER_ADDR/PORT over PET_RDZV_ENDPOINT (host:port).
  std::optional<std::string> addr = get("MASTER_ADDR"), port = get("MASTER_PORT");
  if (!addr) addr = get("PET_MASTER_ADDR");
  if (!port) port = get("PET_MASTER_PORT");
  if (auto endpoint = get("PET_RDZV_ENDPOINT")) {
    const size_t colon = endpoint->rfind(':');
    if (!addr) addr = endpoint->substr(0, colon);
    if (!port && colon != std::string::npos) port = endpoint->substr(colon + 1);
  }
  if (addr) flags.push_back("--master_addr=" + *addr);
  if (port) {
    if (absl::Status s = add("MASTER_PORT or PET_MASTER_PORT", "--master_port", *port, true); !s.ok()) return s;
  }
  if (auto v = get("PET_MAX_RESTARTS")) {
    if (absl::Status s = add("PET_MAX_RESTARTS", "--max_restarts", *v, true); !s.ok()) return s;
  }
  if (auto v = get("PET_STANDALONE"); v && (*v == "1" || absl::AsciiStrToLower(*v) == "true")) {
    flags.push_back("--standalone");
  }
  return flags;
}

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(int rank, int world_size, int local_rank,
                                                                   int local_world_size, int group_rank,
                                                                   const std::string& master_addr,
                                                                   int master_port,
                                                                   const std::string& store_secret,
                                                                   int restart_count) {
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

}  // namespace tinyddp::dist
