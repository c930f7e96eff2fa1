// The test clusters' daemons and a one-node Slurm cluster: see slurm_cluster.h.
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
#include <utility>

#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// Stops a daemon we started: SIGTERM, then SIGKILL after 10 s.
void Stop(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
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

}  // namespace

absl::Status SlurmDaemons::MakeFolder(const std::string& prefix) {
  dir_ = ShortTempDir(prefix);
  if (dir_.empty()) return absl::InternalError("cannot make a folder under /tmp");
  conf_ = dir_ + "/slurm.conf";
  return absl::OkStatus();
}

std::vector<std::string> SlurmDaemons::SlurmdCommand(const std::string& node) const {
  return {FindProgram("slurmd", true), "-D", "-N", node, "-f", conf_};
}

absl::Status SlurmDaemons::StartDaemons(const Shape& shape) {
  fs::create_directories(dir_ + "/state");
  for (const auto& [node, command] : shape.slurmd) fs::create_directories(dir_ + "/spool-" + node);

  // munged: its own key (1 KiB of random bytes, readable by its owner only), socket, pid and log file; one
  // for the whole cluster (its socket is a file, which every node sees).
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

  // slurm.conf: the shape's own lines around what every test cluster shares. config_overrides: slurmd takes
  // the configured CPU count even on a machine with fewer cores.
  const std::string conf = absl::StrCat(
      "# a test cluster of tests/cluster/slurm_cluster.cc; removed when the test ends\n",
      "ClusterName=", shape.name, ::getpid(), "\n",
      "SlurmctldHost=", shape.controller, "\n",
      "SlurmctldPort=", FreePort(), "\n",
      "SlurmdPort=", FreePort(), "\n",
      "SlurmUser=root\nSlurmdUser=root\n",
      "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=", socket, "\n",
      "StateSaveLocation=", dir_, "/state\nSlurmdSpoolDir=", dir_, "/spool-%n\n",
      "SlurmctldPidFile=", dir_, "/slurmctld.pid\nSlurmdPidFile=", dir_, "/slurmd-%n.pid\n",
      "SlurmctldLogFile=", dir_, "/slurmctld.log\nSlurmdLogFile=", dir_, "/slurmd-%n.log\n",
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSwitchType=switch/none\nMpiDefault=none\n",
      "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n",
      "SlurmdParameters=config_overrides\nReturnToService=2\nMailProg=/bin/true\n",
      "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n",
      "JobAcctGatherType=jobacct_gather/none\n",
      shape.nodes);
  { std::ofstream(conf_) << conf; }

  const Env env = ClientEnv();
  slurmctld_ = StartCommand({FindProgram("slurmctld", true), "-D", "-i", "-f", conf_}, env, dir_, "slurmctld");
  for (const auto& [node, command] : shape.slurmd) {
    slurmd_.emplace_back(StartCommand(command, env, dir_, "slurmd-" + node), node);
  }

  // Ready when sinfo reports every node idle, one line each.
  std::string idle;
  for (size_t i = 0; i < slurmd_.size(); ++i) idle += "idle\n";
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<pid_t> pids = {munged_, slurmctld_};
    for (const auto& [pid, node] : slurmd_) pids.push_back(pid);
    for (pid_t pid : pids) {
      if (Exited(pid)) return absl::UnavailableError(absl::StrCat("a daemon exited at start:\n", Logs()));
    }
    CommandResult state = RunCommand({FindProgram("sinfo"), "-h", "-N", "-o", "%t"}, env, dir_, seconds(10));
    last = state.out + state.err;
    if (state.exit_code == 0 && last == idle) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::UnavailableError(absl::StrCat("the nodes were not idle within 60 s (sinfo: ", last, "):\n", Logs()));
}

std::vector<std::string> SlurmDaemons::DaemonNames() const {
  std::vector<std::string> names = {"munged", "slurmctld"};
  for (const auto& [pid, node] : slurmd_) names.push_back("slurmd-" + node);
  return names;
}

std::string SlurmDaemons::Logs() const {
  std::string logs;
  for (const std::string& daemon : DaemonNames()) {
    for (const std::string& name : {daemon + ".err", daemon + ".log"}) {
      const std::string text = dist::testing::ReadFile(dir_ + "/" + name);
      if (text.empty()) continue;
      absl::StrAppend(&logs, "--- ", name, "\n", text.size() <= 2000 ? text : "..." + text.substr(text.size() - 2000),
                      "\n");
    }
  }
  return logs;
}

void SlurmDaemons::StopDaemons() {
  if (slurmctld_ > 0 && !FindProgram("scancel").empty()) {
    RunCommand({FindProgram("scancel"), "--full", "--user=root"}, ClientEnv(), dir_, seconds(10));
  }
  for (auto& [pid, node] : slurmd_) Stop(std::exchange(pid, -1));
  Stop(std::exchange(slurmctld_, -1));
  Stop(std::exchange(munged_, -1));
}

SlurmDaemons::~SlurmDaemons() {
  StopDaemons();
  if (dir_.empty()) return;
  if (const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::error_code ec;
    std::vector<std::string> names = {"slurm.conf"};
    for (const std::string& daemon : DaemonNames()) names.push_back(daemon + ".log");
    for (const std::string& name : names) {
      fs::copy_file(dir_ + "/" + name, std::string(outputs) + "/" + name, fs::copy_options::overwrite_existing, ec);
    }
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string SlurmCluster::WhyCannotRun() {
  return WhyEnginesCannotRun({"srun", "sbatch", "sinfo", "scancel"}, Daemons());
}

absl::StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Start() {
  std::unique_ptr<SlurmCluster> cluster(new SlurmCluster());
  if (absl::Status s = cluster->MakeFolder("tinyddp-slurm"); !s.ok()) return s;
  // This machine as the one node, at 127.0.0.1, with as many CPUs as two ranks need.
  const std::string& node = cluster->node_ = ShortHostName();
  const long cpus = std::max(2L, ::sysconf(_SC_NPROCESSORS_ONLN));
  if (absl::Status s = cluster->StartDaemons(
          {"tinyddp", node + "(127.0.0.1)",
           absl::StrCat("NodeName=", node, " NodeAddr=127.0.0.1 CPUs=", cpus, " State=UNKNOWN\n",
                        "PartitionName=test Nodes=", node, " Default=YES MaxTime=INFINITE State=UP\n"),
           {{node, cluster->SlurmdCommand(node)}}});
      !s.ok()) {
    return s;
  }
  return cluster;
}

}  // namespace tinyddp::testing
