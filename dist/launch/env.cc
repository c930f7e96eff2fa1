// WorkerEnv parsing: see env.h. Each source has a reader function that fills a WorkerEnv and notes
// every problem instead of stopping at the first, so one run tells the user everything to fix.
#include "dist/launch/env.h"

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace tinyddp::dist {
namespace {

// Looks variables up and collects problems ("WORLD_SIZE is missing", "RANK='x' is not an integer").
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

  std::vector<std::string> problems;

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

void ReadEnvVarsSource(VarReader& r, WorkerEnv& env) {
  env.source = EnvSource::kEnvVars;
  env.rank = r.Int("RANK").value_or(0);
  env.world_size = r.Int("WORLD_SIZE").value_or(1);
  auto local_rank = r.OptionalInt("LOCAL_RANK");
  auto local_world_size = r.OptionalInt("LOCAL_WORLD_SIZE");
  if (!local_rank && !local_world_size) {
    // Neither given (a hand-started single-machine job): every rank is on this machine.
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  } else {
    if (!r.Has("LOCAL_RANK")) r.problems.push_back("LOCAL_RANK is missing (LOCAL_WORLD_SIZE is set)");
    if (!r.Has("LOCAL_WORLD_SIZE")) r.problems.push_back("LOCAL_WORLD_SIZE is missing (LOCAL_RANK is set)");
    env.local_rank = local_rank.value_or(0);
    env.local_world_size = local_world_size.value_or(1);
  }
  auto group_rank = r.OptionalInt("GROUP_RANK");
  env.group_rank = group_rank.value_or(env.local_world_size > 0 ? env.rank / env.local_world_size : 0);
  env.master_addr = r.Str("MASTER_ADDR").value_or("");
  env.master_port = r.Int("MASTER_PORT").value_or(0);
}

void ReadSlurmSource(VarReader& r, WorkerEnv& env) {
  env.source = EnvSource::kSlurm;
  env.rank = r.Int("SLURM_PROCID").value_or(0);
  // A job step (srun) may run fewer tasks than the allocation: prefer the step's own count.
  env.world_size = r.Int(r.Has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS").value_or(1);
  env.local_rank = r.Int("SLURM_LOCALID").value_or(0);
  env.group_rank = r.OptionalInt("SLURM_NODEID").value_or(0);
  const char* per_node_var = nullptr;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (r.Has(name)) {
      per_node_var = name;
      break;
    }
  }
  if (per_node_var == nullptr) {
    r.problems.push_back("SLURM_STEP_TASKS_PER_NODE (or SLURM_NTASKS_PER_NODE) is missing");
  } else {
    auto text = r.Str(per_node_var);
    auto counts = text ? ParseTasksPerNode(*text) : std::nullopt;
    if (!counts || counts->empty()) {
      r.problems.push_back(absl::StrCat(per_node_var, "='", text.value_or(""),
                                        "' is not a Slurm task list like '4' or '4(x2),3'"));
    } else {
      // One entry per node, except --ntasks-per-node, which is one number for all nodes.
      env.local_world_size = counts->size() == 1 ? (*counts)[0]
                             : env.group_rank < static_cast<int>(counts->size()) ? (*counts)[env.group_rank]
                                                                                  : (*counts).back();
    }
  }
  if (auto addr = r.OptionalStr("MASTER_ADDR")) {
    env.master_addr = *addr;
  } else if (auto launch_node = r.OptionalStr("SLURM_LAUNCH_NODE_IPADDR")) {
    env.master_addr = *launch_node;  // srun runs on the first node of the allocation, where task 0 runs
  } else {
    r.problems.push_back("MASTER_ADDR is missing (and SLURM_LAUNCH_NODE_IPADDR is not set to fall back on)");
  }
  if (r.Has("MASTER_PORT")) {
    env.master_port = r.Int("MASTER_PORT").value_or(0);
  } else if (auto job = r.OptionalInt("SLURM_JOB_ID")) {
    env.master_port = 20000 + *job % 20000;  // distinct jobs sharing a node rarely collide
  } else {
    r.problems.push_back("MASTER_PORT is missing (and SLURM_JOB_ID is not set to derive one)");
  }
}

void ReadOpenMpiSource(VarReader& r, WorkerEnv& env) {
  env.source = EnvSource::kOpenMpi;
  env.rank = r.Int("OMPI_COMM_WORLD_RANK").value_or(0);
  env.world_size = r.Int("OMPI_COMM_WORLD_SIZE").value_or(1);
  env.local_rank = r.Int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
  env.local_world_size = r.Int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
  // mpirun maps ranks to nodes in blocks by default; it does not export the node index.
  env.group_rank = env.local_world_size > 0 ? env.rank / env.local_world_size : 0;
  // Open MPI does not tell a rank where rank 0 runs, so the user passes it explicitly.
  env.master_addr = r.Str("MASTER_ADDR").value_or("");
  env.master_port = r.Int("MASTER_PORT").value_or(0);
}

void CheckConsistency(VarReader& r, const WorkerEnv& env, const std::string& rank_var,
                      const std::string& size_var, const std::string& local_var) {
  if (!r.problems.empty()) return;  // ranges of values that failed to parse would only add noise
  if (env.world_size < 1) r.problems.push_back(absl::StrCat(size_var, "=", env.world_size, " must be at least 1"));
  if (env.rank < 0 || env.rank >= env.world_size) {
    r.problems.push_back(absl::StrCat(rank_var, "=", env.rank, " must be in [0, ", size_var, "=", env.world_size, ")"));
  }
  if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
    r.problems.push_back(absl::StrCat("the local world size (", env.local_world_size, ") must be in [1, ",
                                      size_var, "=", env.world_size, "]"));
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    r.problems.push_back(absl::StrCat(local_var, "=", env.local_rank, " must be in [0, local world size ",
                                      env.local_world_size, ")"));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    r.problems.push_back(absl::StrCat("MASTER_PORT=", env.master_port,
                                      " must be in [1, 65535] (every rank must name the same, fixed port)"));
  }
}

const char* FixHint(EnvSource source) {
  switch (source) {
    case EnvSource::kEnvVars:
      return "start the program with `launch --nproc_per_node=N PROGRAM` (it sets all of them), or export RANK, "
             "WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself (plus LOCAL_RANK and LOCAL_WORLD_SIZE when "
             "several machines take part)";
    case EnvSource::kSlurm:
      return "run the program with `srun` inside an allocation (srun sets the SLURM_* variables); export "
             "MASTER_ADDR=<host of task 0> and MASTER_PORT if your cluster does not set SLURM_LAUNCH_NODE_IPADDR";
    case EnvSource::kOpenMpi:
      return "pass the store's address to every rank: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 "
             "PROGRAM";
  }
  return "";
}

}  // namespace

const char* EnvSourceName(EnvSource source) {
  switch (source) {
    case EnvSource::kEnvVars:
      return "env://";
    case EnvSource::kSlurm:
      return "Slurm";
    case EnvSource::kOpenMpi:
      return "Open MPI";
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
  return has("RANK") || has("WORLD_SIZE") ||
         (has("SLURM_PROCID") && (has("SLURM_STEP_NUM_TASKS") || has("SLURM_NTASKS"))) ||
         has("OMPI_COMM_WORLD_RANK");
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
        "this process was not started as a rank of a job: none of RANK/WORLD_SIZE (env://), SLURM_PROCID "
        "(Slurm) or OMPI_COMM_WORLD_RANK (Open MPI) is set; start it with `launch --nproc_per_node=N PROGRAM`, "
        "srun or mpirun");
  }
  VarReader r(vars);
  WorkerEnv env;
  std::string why;
  if (r.Has("RANK") || r.Has("WORLD_SIZE")) {
    ReadEnvVarsSource(r, env);
    CheckConsistency(r, env, "RANK", "WORLD_SIZE", "LOCAL_RANK");
    why = "RANK or WORLD_SIZE is set";
  } else if (r.Has("SLURM_PROCID")) {
    ReadSlurmSource(r, env);
    CheckConsistency(r, env, "SLURM_PROCID", "the Slurm task count", "SLURM_LOCALID");
    why = "SLURM_PROCID is set";
  } else {
    ReadOpenMpiSource(r, env);
    CheckConsistency(r, env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
    why = "OMPI_COMM_WORLD_RANK is set";
  }
  if (!r.problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot tell this process's place in the job from its ", EnvSourceName(env.source), " variables (read because ",
        why, "):\n  - ", absl::StrJoin(r.problems, "\n  - "), "\nFix: ", FixHint(env.source), "."));
  }
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

}  // namespace tinyddp::dist
