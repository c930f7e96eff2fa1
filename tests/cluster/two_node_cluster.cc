// A two-node Slurm cluster on one machine: see two_node_cluster.h.
#include "tests/cluster/two_node_cluster.h"

#include <signal.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dist/testing/process_test_util.h"
#include "tests/cluster/slurm_cluster.h"

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

// Runs `ip ARGS`; "" on success, else the command and what it printed.
std::string Ip(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {FindProgram("ip", true)};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = RunCommand(argv, {}, dir, seconds(30));
  return r.exit_code == 0 ? "" : absl::StrCat("`", absl::StrJoin(argv, " "), "` failed: ", r.err, r.out);
}

// SIGTERM, then SIGKILL after 10 s.
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

std::string TwoNodeCluster::WhyCannotRun() {
  std::string why = WhyEnginesCannotRun({"srun", "sbatch", "salloc", "sinfo", "scancel"}, SlurmCluster::Daemons());
  if (!why.empty()) return why;
  for (const char* tool : {"ip", "nsenter", "unshare"}) {
    if (FindProgram(tool, true).empty()) {
      return absl::StrCat("no `", tool, "` (iproute2, util-linux): two emulated nodes need it");
    }
  }
  if (!fs::exists("/proc/self/ns/net") || !fs::exists("/proc/self/ns/uts")) {
    return "this kernel has no network or UTS namespaces: two emulated nodes need both";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<TwoNodeCluster>> TwoNodeCluster::Start() {
  std::unique_ptr<TwoNodeCluster> cluster(new TwoNodeCluster());
  cluster->dir_ = ShortTempDir("tinyddp-slurm2");
  if (cluster->dir_.empty()) return absl::InternalError("cannot make a folder under /tmp");
  if (absl::Status s = cluster->MakeNetwork(); !s.ok()) return s;
  if (absl::Status s = cluster->Launch(); !s.ok()) return s;
  return cluster;
}

// The bridge on the login side, a namespace per node, a veth pair from each to the bridge. Names and a
// /24 carry this process's id, so parallel tests (and a crashed run's leftovers) do not collide.
absl::Status TwoNodeCluster::MakeNetwork() {
  const int id = static_cast<int>(::getpid());
  const std::string subnet = absl::StrCat("10.201.", id % 250, ".");
  bridge_ = absl::StrCat("tdb", id);
  login_address_ = subnet + "1";
  (void)Ip(dir_, {"link", "del", bridge_});
  std::vector<std::vector<std::string>> steps = {
      {"link", "add", bridge_, "type", "bridge"},
      {"addr", "add", login_address_ + "/24", "dev", bridge_},
      {"link", "set", bridge_, "up"},
  };
  for (int i = 0; i < 2; ++i) {
    ns_[i] = absl::StrCat("tdn", id, i);
    veth_[i] = absl::StrCat("tdv", id, i);  // at most 15 characters (IFNAMSIZ)
    address_[i] = absl::StrCat(subnet, i + 2);
    const std::string inside = absl::StrCat("tdc", id, i);
    (void)Ip(dir_, {"netns", "del", ns_[i]});
    (void)Ip(dir_, {"link", "del", veth_[i]});
    steps.push_back({"netns", "add", ns_[i]});
    steps.push_back({"link", "add", veth_[i], "type", "veth", "peer", "name", inside});
    steps.push_back({"link", "set", veth_[i], "master", bridge_});
    steps.push_back({"link", "set", veth_[i], "up"});
    steps.push_back({"link", "set", inside, "netns", ns_[i]});
    steps.push_back({"-n", ns_[i], "addr", "add", address_[i] + "/24", "dev", inside});
    steps.push_back({"-n", ns_[i], "link", "set", inside, "up"});
    steps.push_back({"-n", ns_[i], "link", "set", "lo", "up"});
  }
  for (const auto& step : steps) {
    if (std::string error = Ip(dir_, step); !error.empty()) return absl::UnavailableError(error);
  }
  // The nodes' /etc/hosts: every host by name, as a cluster's DNS would have it. A rank resolves the
  // first host of the node list (the store) and its own name (where Gloo listens) through it.
  std::ofstream(dir_ + "/hosts") << "127.0.0.1 localhost\n"
                                 << login_address_ << " " << ShortHostName() << "\n"
                                 << address_[0] << " " << node(0) << "\n"
                                 << address_[1] << " " << node(1) << "\n";
  return absl::OkStatus();
}

absl::Status TwoNodeCluster::Launch() {
  conf_ = dir_ + "/slurm.conf";
  fs::create_directories(dir_ + "/state");
  for (int i = 0; i < 2; ++i) fs::create_directories(dir_ + "/spool-" + node(i));

  // munged, as in slurm_cluster.cc: its own key, socket, pid and log file; one for the whole cluster.
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

  // slurm.conf: the controller on the login node's bridge address (its host name must be this machine's:
  // slurmctld checks), two nodes of two CPUs at their namespaces' addresses, one spool, pid and log per
  // node (%n, the node's name). The rest as slurm_cluster.cc: no cgroups, root as the Slurm user.
  const std::string conf = absl::StrCat(
      "# a two-node test cluster of tests/cluster/two_node_cluster.cc; removed when the test ends\n",
      "ClusterName=tinyddp2n", ::getpid(), "\n",
      "SlurmctldHost=", ShortHostName(), "(", login_address_, ")\n",
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
      "NodeName=", node(0), " NodeAddr=", address_[0], " CPUs=2 State=UNKNOWN\n",
      "NodeName=", node(1), " NodeAddr=", address_[1], " CPUs=2 State=UNKNOWN\n",
      "PartitionName=test Nodes=", node(0), ",", node(1), " Default=YES MaxTime=INFINITE State=UP\n");
  { std::ofstream(conf_) << conf; }

  const Env env = ClientEnv();
  slurmctld_ = StartCommand({FindProgram("slurmctld", true), "-D", "-i", "-f", conf_}, env, dir_, "slurmctld");
  // Each slurmd enters its node's network namespace (nsenter, not `ip netns exec`: that one remounts /sys,
  // and slurmd then finds no cgroup file system), then a UTS namespace (its host name) and a mount
  // namespace (its /etc/hosts). nsenter, unshare and sh each exec the next: the pid is slurmd's.
  for (int i = 0; i < 2; ++i) {
    const std::string script = absl::StrCat("mount --bind ", dir_, "/hosts /etc/hosts && hostname ", node(i),
                                            " && exec ", FindProgram("slurmd", true), " -D -N ", node(i), " -f ",
                                            conf_);
    slurmd_[i] = StartCommand({FindProgram("nsenter", true), "--net=/run/netns/" + ns_[i], FindProgram("unshare"),
                               "--uts", "--mount", "/bin/sh", "-c", script},
                              env, dir_, "slurmd-" + node(i));
  }

  // Ready when sinfo reports both nodes idle.
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    for (pid_t pid : {munged_, slurmctld_, slurmd_[0], slurmd_[1]}) {
      if (Exited(pid)) return absl::UnavailableError(absl::StrCat("a daemon exited at start:\n", Logs()));
    }
    CommandResult state = RunCommand({FindProgram("sinfo"), "-h", "-N", "-o", "%t"}, env, dir_, seconds(10));
    last = state.out + state.err;
    if (state.exit_code == 0 && last == "idle\nidle\n") return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::UnavailableError(absl::StrCat("the nodes were not idle within 60 s (sinfo: ", last, "):\n", Logs()));
}

std::string TwoNodeCluster::Logs() const {
  std::string logs;
  for (const std::string name : {"munged.err", "munged.log", "slurmctld.err", "slurmctld.log", "slurmd-tnode0.err",
                                 "slurmd-tnode0.log", "slurmd-tnode1.err", "slurmd-tnode1.log"}) {
    const std::string text = dist::testing::ReadFile(dir_ + "/" + name);
    if (!text.empty()) {
      absl::StrAppend(&logs, "--- ", name, "\n", text.size() <= 2000 ? text : "..." + text.substr(text.size() - 2000),
                      "\n");
    }
  }
  return logs;
}

TwoNodeCluster::~TwoNodeCluster() {
  if (slurmctld_ > 0) RunCommand({FindProgram("scancel"), "--full", "--user=root"}, ClientEnv(), dir_, seconds(10));
  for (pid_t pid : slurmd_) Stop(pid);
  Stop(slurmctld_);
  Stop(munged_);
  for (int i = 0; i < 2; ++i) {
    if (!ns_[i].empty()) (void)Ip(dir_, {"netns", "del", ns_[i]});  // takes its end of the veth pair along
  }
  if (!bridge_.empty()) (void)Ip(dir_, {"link", "del", bridge_});
  if (dir_.empty()) return;
  if (const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::error_code ec;
    for (const char* name : {"slurm.conf", "munged.log", "slurmctld.log", "slurmd-tnode0.log", "slurmd-tnode1.log"}) {
      fs::copy_file(dir_ + "/" + name, std::string(outputs) + "/" + name, fs::copy_options::overwrite_existing, ec);
    }
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace tinyddp::testing
