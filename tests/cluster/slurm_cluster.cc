// A one-node Slurm cluster for one test: see slurm_cluster.h.
#include "tests/cluster/slurm_cluster.h"

#include <signal.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

std::string ShortHostName() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string name(host);
  return name.substr(0, name.find('.'));
}

// Stops a daemon we started: SIGTERM, then SIGKILL after `grace`.
void Stop(pid_t pid, seconds grace) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool Exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

std::string Tail(const std::string& path, size_t bytes) {
  const std::string text = dist::testing::ReadFile(path);
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Start() {
  std::unique_ptr<SlurmCluster> cluster(new SlurmCluster());
  absl::Status s = cluster->Launch();
  if (!s.ok()) return s;
  return cluster;
}

absl::Status SlurmCluster::Launch() {
  dir_ = ShortTempDir("tinyddp-slurm");
  if (dir_.empty()) return absl::InternalError("cannot make a folder under /tmp");
  conf_ = dir_ + "/slurm.conf";
  node_ = ShortHostName();
  fs::create_directories(dir_ + "/state");
  fs::create_directories(dir_ + "/spool");

  // munged: its own key (1 KiB of random bytes, readable by its owner only), socket, pid and log file.
  std::string key(1024, '\0');
  if (::getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size())) {
    return absl::InternalError("getrandom failed: no munge key");
  }
  { std::ofstream(dir_ + "/munge.key", std::ios::binary) << key; }
  fs::permissions(dir_ + "/munge.key", fs::perms::owner_read | fs::perms::owner_write);
  const std::string socket = dir_ + "/munge.socket";
  munged_ = StartCommand({FindProgram("munged", true), "--foreground", "--force", "--key-file=" + dir_ + "/munge.key",
                          "--socket=" + socket, "--pid-file=" + dir_ + "/munged.pid",
                          "--log-file=" + dir_ + "/munged.log", "--seed-file=" + dir_ + "/munged.seed"},
                         {}, dir_, "munged");
  if (!dist::testing::WaitForFile(socket, seconds(20))) {
    return absl::UnavailableError(absl::StrCat("munged did not open its socket within 20 s:\n", Logs()));
  }

  // slurm.conf: this machine as the one node, as many CPUs as two ranks need (config_overrides: take the
  // configured count even on a one-core machine), root as the Slurm user (tasks run as the submitter).
  const long cpus = std::max(2L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const std::string conf = absl::StrCat(
      "# a one-node test cluster of tests/cluster/slurm_cluster.cc; removed when the test ends\n",
      "ClusterName=tinyddp", ::getpid(), "\n",
      "SlurmctldHost=", node_, "(127.0.0.1)\n",
      "SlurmctldPort=", FreePort(), "\n",
      "SlurmdPort=", FreePort(), "\n",
      "SlurmUser=root\nSlurmdUser=root\n",
      "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=", socket, "\n",
      "StateSaveLocation=", dir_, "/state\nSlurmdSpoolDir=", dir_, "/spool\n",
      "SlurmctldPidFile=", dir_, "/slurmctld.pid\nSlurmdPidFile=", dir_, "/slurmd.pid\n",
      "SlurmctldLogFile=", dir_, "/slurmctld.log\nSlurmdLogFile=", dir_, "/slurmd.log\n",
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSwitchType=switch/none\nMpiDefault=none\n",
      "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n",
      "SlurmdParameters=config_overrides\nReturnToService=2\nMailProg=/bin/true\n",
      "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n",
      "JobAcctGatherType=jobacct_gather/none\n",
      "NodeName=", node_, " NodeAddr=127.0.0.1 CPUs=", cpus, " State=UNKNOWN\n",
      "PartitionName=test Nodes=", node_, " Default=YES MaxTime=INFINITE State=UP\n");
  { std::ofstream(conf_) << conf; }

  const Env env = ClientEnv();
  slurmctld_ = StartCommand({FindProgram("slurmctld", true), "-D", "-i", "-f", conf_}, env, dir_, "slurmctld");
  slurmd_ = StartCommand({FindProgram("slurmd", true), "-D", "-N", node_, "-f", conf_}, env, dir_, "slurmd");

  // Ready when sinfo reports the node idle.
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    for (pid_t pid : {munged_, slurmctld_, slurmd_}) {
      if (Exited(pid)) return absl::UnavailableError(absl::StrCat("a daemon exited at start:\n", Logs()));
    }
    CommandResult state = RunCommand({FindProgram("sinfo"), "-h", "-o", "%t"}, env, dir_, seconds(10));
    last = state.out + state.err;
    if (state.exit_code == 0 && absl::StartsWith(state.out, "idle")) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::UnavailableError(absl::StrCat("the node was not idle within 60 s (sinfo: ", last, "):\n", Logs()));
}

std::string SlurmCluster::Logs() const {
  std::string logs;
  for (const char* name : {"munged.err", "munged.log", "slurmctld.err", "slurmctld.log", "slurmd.err", "slurmd.log"}) {
    const std::string path = dir_ + "/" + name;
    if (fs::exists(path)) absl::StrAppend(&logs, "--- ", name, "\n", Tail(path, 2000), "\n");
  }
  return logs;
}

SlurmCluster::~SlurmCluster() {
  if (slurmctld_ > 0 && !FindProgram("scancel").empty()) {
    RunCommand({FindProgram("scancel"), "--full", "--user=root"}, ClientEnv(), dir_, seconds(10));
  }
  Stop(slurmd_, seconds(10));
  Stop(slurmctld_, seconds(10));
  Stop(munged_, seconds(10));
  if (dir_.empty()) return;
  if (const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::error_code ec;
    for (const char* name : {"slurm.conf", "munged.log", "slurmctld.log", "slurmd.log"}) {
      fs::copy_file(dir_ + "/" + name, std::string(outputs) + "/" + name, fs::copy_options::overwrite_existing, ec);
    }
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace tinyddp::testing
