// SlurmCluster: a one-node Slurm cluster of this machine, for one test. Its own munged (a fresh key,
// socket, pid and log file), slurmctld and slurmd, all configured in a fresh folder under /tmp
// (slurm.conf with free ports, state and spool folders, proctrack/linuxproc and task/none, which need
// no cgroups), and stopped, with any job left, when the object goes away.
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

#include "absl/status/statusor.h"
#include "tests/cluster/engines.h"

namespace tinyddp::testing {

class SlurmCluster {
 public:
  /// The programs the cluster and its tests need, for WhyEnginesCannotRun.
  static std::vector<std::string> Clients() { return {"srun", "sbatch", "sinfo", "scancel"}; }
  static std::vector<std::string> Daemons() { return {"munged", "slurmctld", "slurmd"}; }

  /// Starts munged, slurmctld and slurmd and waits (at most 60 s) until the node takes jobs. Errors
  /// carry the daemons' logs. Precondition: WhyEnginesCannotRun(Clients(), Daemons()) is "".
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start();
  /// Cancels any job left, stops the daemons (SIGTERM, then SIGKILL after 10 s), and removes the folder
  /// (its logs are copied to TEST_UNDECLARED_OUTPUTS_DIR first, when Bazel gives one).
  ~SlurmCluster();

  /// The environment every client command (srun, sbatch, sinfo) runs with.
  Env ClientEnv() const { return {{"SLURM_CONF", conf_}}; }
  /// The cluster's node: this machine's short host name.
  const std::string& node() const { return node_; }
  /// The cluster's folder (slurm.conf, the daemons' logs), for a test's own files too.
  const std::string& dir() const { return dir_; }

 private:
  SlurmCluster() = default;
  absl::Status Launch();
  std::string Logs() const;

  std::string dir_, conf_, node_;
  pid_t munged_ = -1, slurmctld_ = -1, slurmd_ = -1;
};

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_CLUSTER_SLURM_CLUSTER_H_
