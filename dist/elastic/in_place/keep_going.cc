// KeepGoingAfterLoss: see keep_going.h.
#include "dist/elastic/in_place/keep_going.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist::in_place {

namespace {

// fork + exec of `spec` with `extra` in its environment (this process's, then the spec's, then `extra`, each
// replacing a variable of the same name), in a process group of its own, dying with us.
pid_t StartReplacement(const WorkerProcessSpec& spec, const std::pair<std::string, std::string>& extra) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [key, value] : spec.env) merged[key] = value;
  merged[extra.first] = extra.second;
  std::vector<std::string> args = spec.argv, env_strings;
  for (const auto& [key, value] : merged) env_strings.push_back(key + "=" + value);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> KeepGoingAfterLoss::WorkerEnvironment(int round, int rank) {
  if (replacements_left_ == 0) return {};
  return {{kReplacementsEnv, absl::StrCat(replacements_left_)}};
}

std::chrono::milliseconds KeepGoingAfterLoss::HoldStop(const WorkerExit& exit, bool holding) {
  // A replica killed by a signal (a crash, the OOM killer, fencing of a frozen one) is replaced while the budget
  // lasts; one that exited by itself (fewer than --min_replicas, excluded) is not.
  if (exit.signaled && replacements_left_ > 0) {
    for (const WorkerProcessSpec& spec : specs_) {
      if (spec.rank != exit.rank) continue;
      const pid_t pid = StartReplacement(spec, {kReplacementEnv, "1"});
      if (pid > 0) {
        --replacements_left_;
        replacement_pids_.push_back(pid);
        std::fprintf(stderr, "in-place recovery: started a replacement for rank %d (pid %d; %d more allowed by "
                             "--max_restarts); it rejoins at a step boundary\n",
                     exit.rank, static_cast<int>(pid), replacements_left_);
      }
    }
  }
  return std::chrono::hours(24 * 7);
}

void KeepGoingAfterLoss::Finish(bool job_succeeded) {
  // The replacements end with the survivors (they leave together); one still running after a grace is stopped,
  // and at once when the round failed (its survivors are gone: nobody will take it in).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(job_succeeded ? 30 : 0);
  for (const int pid : replacement_pids_) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  replacement_pids_.clear();
}

void KeepGoingAfterLoss::Judge(JobResult& result) {
  if (result.interrupted || result.exit_code == 0) return;
  std::vector<std::string> finished, lost;
  for (const WorkerExit& exit : result.exits) {
    (exit.ok() ? finished : lost).push_back(absl::StrCat(exit.rank));
  }
  if (finished.empty()) return;  // nobody finished: the job failed (fewer than --min_replicas remained)
  result.exit_code = 0;
  result.reason = absl::StrCat("finished by replicas ", absl::StrJoin(finished, ","), " after losing ",
                               absl::StrJoin(lost, ","), " (in-place recovery, --min_replicas)");
}

bool ProgramAsksToKeepGoing(const std::vector<std::string>& program) {
  int64_t k = 0;
  for (size_t i = 1; i < program.size(); ++i) {
    if (absl::StartsWith(program[i], "--min_replicas=")) {
      k = absl::SimpleAtoi(program[i].substr(15), &k) ? k : 0;
    } else if (program[i] == "--min_replicas" && i + 1 < program.size()) {
      k = absl::SimpleAtoi(program[i + 1], &k) ? k : 0;
    }
  }
  return k > 0;
}

}  // namespace tinyddp::dist::in_place
