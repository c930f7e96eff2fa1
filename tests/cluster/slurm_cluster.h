// The Slurm clusters the tests start for themselves. SlurmDaemons is what every such cluster has, whatever
// its shape, so that SlurmCluster (here) and TwoNodeCluster (two_node_cluster.h) write only their own:
// a fresh folder under /tmp; its own munged (a fresh key, socket, pid and log file); a slurm.conf with free
// ports, state, spool, pid and log files in that folder (one of each per slurmd: %n), proctrack/linuxproc
// and task/none, which need no cgroups, and root as the Slurm user (tasks run as the submitter); slurmctld
// and a slurmd per node; ready once sinfo shows every node idle; stopped, with any job left, when the
// object goes away.
//
// SlurmCluster: a one-node Slurm cluster of this machine, for one test.
//
// Never /etc/slurm, never a real cluster: the daemons read this folder's slurm.conf only (-f and
// SLURM_CONF), and every client command the test runs gets ClientEnv(): this cluster's SLURM_CONF, with
// none of the SLURM_* variables of an enclosing job (engines.h, StartCommand). On a login node of a real
// cluster, an sbatch without them would submit a real job.
#ifndef TINYDDP_TESTS_CLUSTER_SLURM_CLUSTER_H_
#define TINYDDP_TESTS_CLUSTER_SLURM_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/cluster/engines.h"

namespace tinyddp::testing {

class SlurmDaemons {
 public:
  /// The daemons a Slurm cluster needs, for WhyEnginesCannotRun.
  static std::vector<std::string> Daemons() { return {"munged", "slurmctld", "slurmd"}; }

  SlurmDaemons(const SlurmDaemons&) = delete;
  SlurmDaemons& operator=(const SlurmDaemons&) = delete;

  /// The environment every client command (srun, salloc, sbatch, sinfo) runs with.
  Env ClientEnv() const { return {{"SLURM_CONF", conf_}}; }
  /// The cluster's folder (slurm.conf, the daemons' logs), for a test's own files too.
  const std::string& dir() const { return dir_; }

 protected:
  /// What tells one cluster's slurm.conf from another's; the rest is the same for all.
  struct Shape {
    std::string name;        // ClusterName (this process's id is appended)
    std::string controller;  // SlurmctldHost: "host(address)"
    std::string nodes;       // the NodeName and PartitionName lines
    /// Per node name, the command line that starts its slurmd: SlurmdCommand(node), or one that enters
    /// the node first and then execs it.
    std::vector<std::pair<std::string, std::vector<std::string>>> slurmd;
  };

  SlurmDaemons() = default;
  /// StopDaemons, then removes the folder (its slurm.conf and logs are copied to
  /// TEST_UNDECLARED_OUTPUTS_DIR first, when Bazel gives one).
  ~SlurmDaemons();

  /// Makes the cluster's folder: /tmp/PREFIX-XXXXXX.
  absl::Status MakeFolder(const std::string& prefix);
  /// `slurmd -D -N node -f slurm.conf`.
  std::vector<std::string> SlurmdCommand(const std::string& node) const;
  /// Starts munged, writes slurm.conf, starts slurmctld and every slurmd, and waits (at most 60 s) until
  /// sinfo shows every node idle. Errors carry the daemons' logs.
  absl::Status StartDaemons(const Shape& shape);
  /// Cancels any job left and stops the daemons (SIGTERM, then SIGKILL after 10 s each); again, nothing.
  void StopDaemons();

 private:
  std::string Logs() const;
  std::vector<std::string> DaemonNames() const;  // munged, slurmctld, slurmd-NODE...: their .err and .log

  std::string dir_, conf_;
  pid_t munged_ = -1, slurmctld_ = -1;
  std::vector<std::pair<pid_t, std::string>> slurmd_;  // pid and node
};

class SlurmCluster : public SlurmDaemons {
 public:
  /// "" when this machine can make the cluster; otherwise why not (no root, no engines), for GTEST_SKIP.
  static std::string WhyCannotRun();

  /// This machine as the one node. Precondition: WhyCannotRun() is "".
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start();

  /// The cluster's node: this machine's short host name.
  const std::string& node() const { return node_; }

 private:
  SlurmCluster() = default;

  std::string node_;
};

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_CLUSTER_SLURM_CLUSTER_H_
