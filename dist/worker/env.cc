// WorkerEnv from env://: see env.h. Every problem is noted, not only the first, so that one run tells the
// user everything to fix.
#include "dist/worker/env.h"

#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace tinyddp::dist {
namespace {

// An integer variable: `required` and missing, or present and malformed, is a problem.
std::optional<int> Int(const EnvVars& vars, const char* name, bool required, std::vector<std::string>& problems) {
  auto it = vars.find(name);
  if (it == vars.end() || it->second.empty()) {
    if (required) problems.push_back(absl::StrCat(name, " is missing"));
    return std::nullopt;
  }
  int value = 0;
  if (absl::SimpleAtoi(it->second, &value)) return value;
  problems.push_back(absl::StrCat(name, "='", it->second, "' is not an integer"));
  return std::nullopt;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1";
}

}  // namespace

std::string WorkerEnv::DebugString() const {
  return absl::StrCat("rank ", rank, "/", world_size, " (local ", local_rank, "/", local_world_size, ", node ",
                      group_rank, ") store ", master_addr, ":", master_port,
                      launcher_hosts_store ? " hosted by the launcher" : "", " [", source, "]");
}

EnvVars CurrentEnvironment() {
  EnvVars vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::pair<std::string, std::string> entry = absl::StrSplit(*e, absl::MaxSplits('=', 1));
    vars.insert(std::move(entry));
  }
  return vars;
}

bool IsWorker(const EnvVars& vars) { return vars.count("RANK") > 0 || vars.count("WORLD_SIZE") > 0; }

bool IsWorker() { return IsWorker(CurrentEnvironment()); }

int RestartCount() {
  const char* text = std::getenv(kRestartCountEnv);
  int n = 0;
  return text != nullptr && absl::SimpleAtoi(text, &n) && n > 0 ? n : 0;
}

std::string StoreHost(const std::string& master_addr) {
  const bool bracketed = master_addr.size() > 2 && master_addr.front() == '[' && master_addr.back() == ']';
  return bracketed ? master_addr.substr(1, master_addr.size() - 2) : master_addr;
}

absl::StatusOr<WorkerEnv> ReadWorkerEnv(const EnvVars& vars) {
  if (!IsWorker(vars)) {
    return absl::NotFoundError(
        "this process was not started as a rank of a job: neither RANK nor WORLD_SIZE (env://) is set; start it "
        "with `launch --nproc_per_node=N PROGRAM` (or srun, mpirun: docs/clusters.md says which programs read them)");
  }
  std::vector<std::string> problems;
  WorkerEnv env;
  env.rank = Int(vars, "RANK", true, problems).value_or(0);
  env.world_size = Int(vars, "WORLD_SIZE", true, problems).value_or(1);
  auto addr = vars.find("MASTER_ADDR");
  if (addr == vars.end() || addr->second.empty()) {
    problems.push_back("MASTER_ADDR is missing");
  } else {
    env.master_addr = StoreHost(addr->second);
  }
  env.master_port = Int(vars, "MASTER_PORT", true, problems).value_or(0);
  // The processes on this machine: LOCAL_* when set; else all of them for a loopback store, which no other
  // machine could reach; else one per machine (a pod).
  if (vars.count("LOCAL_RANK") || vars.count("LOCAL_WORLD_SIZE")) {
    env.local_rank = Int(vars, "LOCAL_RANK", true, problems).value_or(0);
    env.local_world_size = Int(vars, "LOCAL_WORLD_SIZE", true, problems).value_or(1);
  } else if (IsLoopback(env.master_addr)) {
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  }
  env.group_rank = Int(vars, "GROUP_RANK", false, problems)
                       .value_or(env.local_world_size > 0 ? env.rank / env.local_world_size : 0);
  if (problems.empty()) {  // ranges of values that failed to parse would only add noise
    if (env.world_size < 1) problems.push_back(absl::StrCat("WORLD_SIZE=", env.world_size, " must be at least 1"));
    if (env.rank < 0 || env.rank >= env.world_size) {
      problems.push_back(absl::StrCat("RANK=", env.rank, " must be in [0, WORLD_SIZE=", env.world_size, ")"));
    }
    if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
      problems.push_back(absl::StrCat("the local world size (", env.local_world_size, ") must be in [1, WORLD_SIZE=",
                                      env.world_size, "]"));
    }
    if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
      problems.push_back(absl::StrCat("LOCAL_RANK=", env.local_rank, " must be in [0, local world size ",
                                      env.local_world_size, ")"));
    }
    if (env.master_port < 1 || env.master_port > 65535) {
      problems.push_back(absl::StrCat("MASTER_PORT=", env.master_port,
                                      " must be in [1, 65535] (every rank must name the same, fixed port)"));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot tell this process's place in the job from its env:// variables (read because RANK or WORLD_SIZE "
        "is set):\n  - ", absl::StrJoin(problems, "\n  - "),
        "\nFix: start the program with `launch --nproc_per_node=N PROGRAM` (it sets all of them), or export RANK, "
        "WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself (plus LOCAL_RANK and LOCAL_WORLD_SIZE when several ranks "
        "share a machine whose MASTER_ADDR is not a loopback address)."));
  }
  if (absl::Status s = ReadLauncherVariables(vars, env); !s.ok()) return s;
  return env;
}

absl::StatusOr<WorkerEnv> ReadWorkerEnv() { return ReadWorkerEnv(CurrentEnvironment()); }

absl::Status ReadLauncherVariables(const EnvVars& vars, WorkerEnv& env) {
  auto hosted = vars.find(kLauncherStoreEnv);
  env.launcher_hosts_store = hosted != vars.end() && hosted->second == "1";
  auto restart = vars.find(kRestartCountEnv);
  if (restart != vars.end() && !absl::SimpleAtoi(restart->second, &env.restart_count)) {
    return absl::InvalidArgumentError(absl::StrCat(kRestartCountEnv, "=", restart->second,
                                                   " is not a number; it is set by the launcher (0, 1, ...)"));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
