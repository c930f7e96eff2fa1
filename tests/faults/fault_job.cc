// Fault-test jobs: see fault_job.h.
#include "tests/faults/fault_job.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/testing/process_test_util.h"

namespace tinyddp::testing {

namespace t = ::tinyddp::dist::testing;

std::string Runfile(const std::string& path, const char* env_override) {
  if (const char* explicit_path = std::getenv(env_override)) return explicit_path;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/", workspace != nullptr ? workspace : "tinyddp", "/", path);
}

std::vector<std::string> TinyTrainingJob(const std::string& backend) {
  return {"--dataset=synthetic", "--synthetic_examples=1200", "--synthetic_input_size=32", "--hidden=24",
          "--batch_size=32",     "--backend=" + backend,      "--log_every=5",             "--epochs=300"};
}

std::string Job::Output() const { return t::ReadFile(out_path) + t::ReadFile(err_path); }

Job StartJob(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env) {
  static int counter = 0;
  const std::string dir = t::MakeTempDir();
  Job job;
  job.out_path = absl::StrCat(dir, "/out", counter, ".txt");
  job.err_path = absl::StrCat(dir, "/err", counter++, ".txt");
  std::vector<std::string> unset = t::LauncherVariables();
  for (const char* v : {"TINYDDP_FAULT", "TINYDDP_TIMEOUT", "TINYDDP_FLIGHT_RECORDER_DIR", "TINYDDP_DISTRIBUTED_DEBUG",
                        "BUILD_WORKING_DIRECTORY"}) {
    unset.push_back(v);
  }
  job.pid = t::StartProcess(argv, env, unset, job.out_path, job.err_path);  // `env` wins over `unset`
  return job;
}

std::vector<std::string> LaunchArgv(const std::vector<std::string>& launch_args,
                                    const std::vector<std::string>& program_args) {
  std::vector<std::string> argv = {Runfile("dist/launch/launch", "LAUNCH_BINARY")};
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  argv.push_back(Runfile("examples/ddp_mlp", "DDP_MLP_BINARY"));
  argv.insert(argv.end(), program_args.begin(), program_args.end());
  return argv;
}

namespace {

// True once `pid` (a child not yet reaped) has exited: a zombie, seen without reaping it.
bool Exited(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace

bool WaitForOutput(const Job& job, const std::string& text, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (absl::StrContains(job.Output(), text)) return true;
    if (Exited(job.pid)) return absl::StrContains(job.Output(), text);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string Ended::How() const {
  if (!finished) return "still running at the bound (killed)";
  return signaled ? absl::StrCat("signal ", value) : absl::StrCat("exit status ", value);
}

Ended WaitJob(const Job& job, std::chrono::seconds bound) {
  Ended e;
  const std::optional<int> status = t::WaitFor(job.pid, bound);
  if (!status) return e;
  e.finished = true;
  e.signaled = WIFSIGNALED(*status);
  e.value = e.signaled ? WTERMSIG(*status) : WEXITSTATUS(*status);
  return e;
}

pid_t WorkerPid(pid_t launcher, int rank) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": the comm may hold spaces, so read after the last ')'.
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(line.substr(paren + 2), ' ');
    int ppid = 0;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid) || ppid != launcher) continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    std::stringstream text;
    text << environ.rdbuf();
    for (absl::string_view var : absl::StrSplit(text.str(), '\0')) {
      if (var == absl::StrCat("RANK=", rank)) return pid;
    }
  }
  return -1;
}

}  // namespace tinyddp::testing
