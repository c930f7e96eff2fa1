// A two-node Slurm cluster on one machine: see two_node_cluster.h.
#include "tests/cluster/two_node_cluster.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// Runs `ip ARGS`; "" on success, else the command and what it printed.
std::string Ip(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {FindProgram("ip", true)};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = RunCommand(argv, {}, dir, seconds(30));
  return r.exit_code == 0 ? "" : absl::StrCat("`", absl::StrJoin(argv, " "), "` failed: ", r.err, r.out);
}

}  // namespace

std::string TwoNodeCluster::WhyCannotRun() {
  std::string why = WhyEnginesCannotRun({"srun", "sbatch", "salloc", "sinfo", "scancel"}, Daemons());
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
  if (absl::Status s = cluster->MakeFolder("tinyddp-slurm2"); !s.ok()) return s;
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
  (void)Ip(dir(), {"link", "del", bridge_});
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
    (void)Ip(dir(), {"netns", "del", ns_[i]});
    (void)Ip(dir(), {"link", "del", veth_[i]});
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
    if (std::string error = Ip(dir(), step); !error.empty()) return absl::UnavailableError(error);
  }
  // The nodes' /etc/hosts: every host by name, as a cluster's DNS would have it. A rank resolves the
  // first host of the node list (the store) and its own name (where Gloo listens) through it.
  std::ofstream(dir() + "/hosts") << "127.0.0.1 localhost\n"
                                  << login_address_ << " " << ShortHostName() << "\n"
                                  << address_[0] << " " << node(0) << "\n"
                                  << address_[1] << " " << node(1) << "\n";
  return absl::OkStatus();
}

// The controller on the login node's bridge address (its host name must be this machine's: slurmctld
// checks), two nodes of two CPUs at their namespaces' addresses. Each slurmd enters its node's network
// namespace (nsenter, not `ip netns exec`: that one remounts /sys, and slurmd then finds no cgroup file
// system), then a UTS namespace (its host name) and a mount namespace (its /etc/hosts). nsenter, unshare
// and sh each exec the next: the pid is slurmd's.
absl::Status TwoNodeCluster::Launch() {
  Shape shape = {"tinyddp2n", absl::StrCat(ShortHostName(), "(", login_address_, ")")};
  for (int i = 0; i < 2; ++i) {
    absl::StrAppend(&shape.nodes, "NodeName=", node(i), " NodeAddr=", address_[i], " CPUs=2 State=UNKNOWN\n");
    const std::string script = absl::StrCat("mount --bind ", dir(), "/hosts /etc/hosts && hostname ", node(i),
                                            " && exec ", absl::StrJoin(SlurmdCommand(node(i)), " "));
    shape.slurmd.push_back({node(i), {FindProgram("nsenter", true), "--net=/run/netns/" + ns_[i],
                                      FindProgram("unshare"), "--uts", "--mount", "/bin/sh", "-c", script}});
  }
  absl::StrAppend(&shape.nodes, "PartitionName=test Nodes=", node(0), ",", node(1),
                  " Default=YES MaxTime=INFINITE State=UP\n");
  return StartDaemons(shape);
}

TwoNodeCluster::~TwoNodeCluster() {
  StopDaemons();
  for (int i = 0; i < 2; ++i) {
    if (!ns_[i].empty()) (void)Ip(dir(), {"netns", "del", ns_[i]});  // takes its end of the veth pair along
  }
  if (!bridge_.empty()) (void)Ip(dir(), {"link", "del", bridge_});
}

}  // namespace tinyddp::testing
