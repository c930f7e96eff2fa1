// What the engine tests share: see engines.h.
#include "tests/cluster/engines.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dist/init.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"

extern char** environ;

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;

bool IsExecutable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Variables that would make a child think it is already part of some job (ours, or an enclosing one:
// a test run inside a Slurm allocation must not hand its SLURM_* to the test cluster's commands).
bool BelongsToAnEnclosingJob(const std::string& name) {
  for (const char* prefix : {"SLURM_", "SLURMD_", "OMPI_", "PMI_", "PMIX_", "PET_", "TORCHELASTIC_", "TINYDDP_",
                             "MPI_LOCAL", "KUBERNETES_"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  for (const std::string& launcher : dist::testing::LauncherVariables()) {
    if (name == launcher) return true;
  }
  return name == "JOB_COMPLETION_INDEX" || name == "BUILD_WORKING_DIRECTORY";
}

// This machine's host name ("" when gethostname fails).
std::string HostName() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : "";
}

}  // namespace

std::string FindProgram(const std::string& name, bool sbin) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty());
  if (sbin) dirs.insert(dirs.end(), {"/usr/local/sbin", "/usr/sbin", "/sbin"});
  for (const std::string& dir : dirs) {
    if (IsExecutable(dir + "/" + name)) return dir + "/" + name;
  }
  return "";
}

std::string WhyEnginesCannotRun(const std::vector<std::string>& programs, const std::vector<std::string>& daemons) {
  std::vector<std::string> missing;
  for (const std::string& p : programs) {
    if (FindProgram(p).empty()) missing.push_back(p);
  }
  for (const std::string& d : daemons) {
    if (FindProgram(d, /*sbin=*/true).empty()) missing.push_back(d);
  }
  if (!missing.empty()) {
    const char* path = std::getenv("PATH");
    return absl::StrCat(absl::StrJoin(missing, ", "), " not found on PATH (", path != nullptr ? path : "",
                        (daemons.empty() ? "" : ", and /usr/sbin, /sbin for the daemons"),
                        "): install the engines with tools/install_cluster_engines.sh (slurm-wlm, munge, openmpi-bin)");
  }
  if (!daemons.empty() && ::geteuid() != 0) {
    return "needs root: the test cluster's slurmd runs job steps as root, and munged its own key (run the test as "
           "root, as CI does)";
  }
  return "";
}

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/", workspace != nullptr ? workspace : "tinyddp", "/", path);
}

std::string ShortTempDir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  ::chmod(pattern.c_str(), 0755);
  return pattern;
}

std::string CommandResult::Explain() const {
  return absl::StrCat(timed_out ? "(killed: past its bound)\n" : "", "exit ", exit_code, "\nstdout:\n", out,
                      "\nstderr:\n", err);
}

pid_t StartCommand(const std::vector<std::string>& argv, const Env& env, const std::string& cwd,
                   const std::string& name) {
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const std::string var = entry.substr(0, entry.find('='));
    bool dropped = BelongsToAnEnclosingJob(var);
    for (const auto& [k, v] : env) dropped |= var == k;
    if (!dropped) entries.push_back(entry);
  }
  for (const auto& [k, v] : env) entries.push_back(k + "=" + v);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : entries) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const std::string out = cwd + "/" + name + ".out", err = cwd + "/" + name + ".err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  return pid;
}

CommandResult WaitCommand(pid_t pid, const std::string& cwd, const std::string& name, std::chrono::seconds bound) {
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = dist::testing::ReadFile(cwd + "/" + name + ".out");
  r.err = dist::testing::ReadFile(cwd + "/" + name + ".err");
  return r;
}

CommandResult RunCommand(const std::vector<std::string>& argv, const Env& env, const std::string& cwd,
                         std::chrono::seconds bound) {
  static int counter = 0;
  const std::string name = absl::StrCat("command", counter++);
  return WaitCommand(StartCommand(argv, env, cwd, name), cwd, name, bound);
}

std::vector<std::string> TinyJob(const std::string& checkpoint_dir) {
  return {"--dataset=synthetic", "--synthetic_examples=1200", "--synthetic_input_size=32", "--hidden=24",
          "--batch_size=32",     "--lr=0.2",                  "--backend=gloo",             "--epochs=1",
          "--max_steps=12",      "--checkpoint_every=6",      "--log_every=6",              "--timeout=60s",
          "--checkpoint_dir=" + checkpoint_dir};
}

std::vector<std::string> TinyJobUnder(std::vector<std::string> engine, const std::string& checkpoint_dir) {
  engine.push_back(Runfile("examples/ddp_mlp"));
  for (const std::string& flag : TinyJob(checkpoint_dir)) engine.push_back(flag);
  return engine;
}

const std::string& ReferenceCheckpoint() {
  static const std::string* checkpoint = [] {
    const std::string dir = dist::testing::MakeTempDir();
    const std::vector<std::string> argv =
        TinyJobUnder({Runfile("dist/launch/launch"), "--nproc_per_node=2"}, dir + "/reference");
    const CommandResult run = RunCommand(argv, {}, dir, std::chrono::seconds(180));
    std::string latest = LatestCheckpoint(dir + "/reference");
    if (run.exit_code != 0 || latest.empty()) {
      ADD_FAILURE() << "the reference run, launch --nproc_per_node=2 ddp_mlp, failed:\n" << run.Explain();
      latest.clear();
    }
    return new std::string(latest);
  }();
  return *checkpoint;
}

std::string LatestCheckpoint(const std::string& checkpoint_dir) {
  std::string latest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool newer = latest.empty() || name > fs::path(latest).filename().string();
    if (absl::StartsWith(name, "step-") && entry.is_directory() && newer) {
      latest = entry.path().string();
    }
  }
  return latest;
}

std::string CompareCheckpoints(const std::string& expected, const std::string& actual) {
  if (expected.empty() || actual.empty()) return "a checkpoint is missing";
  const std::string expected_step = fs::path(expected).filename().string();
  const std::string actual_step = fs::path(actual).filename().string();
  if (expected_step != actual_step) return absl::StrCat("the runs ended at ", expected_step, " and ", actual_step);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string a = dist::testing::ReadFile(expected + "/" + file);
    const std::string b = dist::testing::ReadFile(actual + "/" + file);
    if (a.empty()) return absl::StrCat(expected, "/", file, " is empty or missing");
    if (a != b) {
      size_t at = 0;
      while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
      return absl::StrCat(file, " differs: ", a.size(), " vs ", b.size(), " bytes, first difference at byte ", at);
    }
  }
  return "";
}

std::map<int, std::map<std::string, std::string>> ProbeLines(const std::string& output) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::ConsumePrefix(&line, "probe ")) continue;
    std::map<std::string, std::string> fields;
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      fields[kv.first] = kv.second;
    }
    int rank = -1;
    if (absl::SimpleAtoi(fields["rank"], &rank)) by_rank[rank] = fields;
  }
  return by_rank;
}

std::string AutoBackend(int ranks_here) {
  return dist::BackendName(dist::ResolveBackend(dist::Backend::kAuto, ranks_here));
}

bool Resolves(const std::string& host) {
  addrinfo* list = nullptr;
  const bool ok = ::getaddrinfo(host.c_str(), nullptr, nullptr, &list) == 0;
  if (list != nullptr) ::freeaddrinfo(list);
  return ok;
}

std::string ResolvableHostName() {
  const std::string host = HostName();
  return !host.empty() && Resolves(host) ? host : "";
}

std::string ShortHostName() {
  const std::string host = HostName();
  return host.substr(0, host.find('.'));
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace tinyddp::testing
