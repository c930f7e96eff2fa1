// Process test helpers: see process_test_util.h.
#include "dist/testing/process_test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace tinyddp::dist::testing {

std::string SelfPath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

std::string MakeTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/tinyddp_XXXXXX";
  char* made = ::mkdtemp(pattern.data());
  return made ? std::string(made) : std::string();
}

pid_t StartProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& set,
                   const std::vector<std::string>& unset, const std::string& stdout_path,
                   const std::string& stderr_path) {
  // Everything is prepared before fork(); the child only redirects and execs.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool drop = false;
    for (const auto& u : unset) drop |= name == u;
    for (const auto& [k, v] : set) drop |= name == k;
    if (!drop) env.push_back(entry);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!stdout_path.empty()) {
      int fd = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
    }
    if (!stderr_path.empty()) {
      int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  return pid;
}

std::optional<int> WaitFor(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  struct stat st;
  while (::stat(path.c_str(), &st) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  ::rename(tmp.c_str(), path.c_str());
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

std::vector<std::string> LauncherVariables() {
  return {"RANK",         "WORLD_SIZE",         "LOCAL_RANK",        "LOCAL_WORLD_SIZE",     "GROUP_RANK",
          "MASTER_ADDR",  "MASTER_PORT",        "TINYDDP_LAUNCHER_STORE", "TINYDDP_NPROC",  "OMP_NUM_THREADS",
          "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
}

}  // namespace tinyddp::dist::testing
