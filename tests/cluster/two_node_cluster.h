// TwoNodeCluster: a Slurm cluster of two compute nodes on this one machine, for one test, the way a real
// cluster looks from its login node. Each node is a network namespace with its own host name (a UTS
// namespace), its own address and its own /etc/hosts (a mount namespace), joined to this namespace (the
// login node, which runs slurmctld and the client commands) by a bridge and a veth pair per node:
//
//     login node (this namespace)      bridge tdb<pid>, 10.201.N.1   slurmctld, srun, salloc, sbatch
//       +-- veth -- node tnode0 (netns), 10.201.N.2                  slurmd -N tnode0, the ranks it runs
//       +-- veth -- node tnode1 (netns), 10.201.N.3                  slurmd -N tnode1
//
// One munged serves all three: its socket is a file, and the namespaces share this file system. Each
// slurmd has its own spool folder, pid file and log (slurm.conf's %n). The daemons, slurm.conf and the
// folder are SlurmDaemons' (slurm_cluster.h), as for SlurmCluster: never /etc/slurm, everything in a fresh
// folder under /tmp, gone when the object is.
// Needs root (namespaces, a bridge), iproute2, nsenter and unshare (util-linux), and Slurm's daemons.
#ifndef TINYDDP_TESTS_CLUSTER_TWO_NODE_CLUSTER_H_
#define TINYDDP_TESTS_CLUSTER_TWO_NODE_CLUSTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tests/cluster/slurm_cluster.h"

namespace tinyddp::testing {

class TwoNodeCluster : public SlurmDaemons {
 public:
  /// "" when this machine can make the cluster; otherwise why not, for GTEST_SKIP.
  static std::string WhyCannotRun();

  /// Makes the namespaces and the bridge, starts munged, slurmctld and both slurmd, and waits (at most
  /// 60 s) until both nodes take jobs. Errors carry the daemons' logs. Precondition: WhyCannotRun() is "".
  static absl::StatusOr<std::unique_ptr<TwoNodeCluster>> Start();
  /// Stops the daemons and removes the namespaces and the bridge; ~SlurmDaemons then removes the folder
  /// (its logs copied to TEST_UNDECLARED_OUTPUTS_DIR first, when Bazel gives one).
  ~TwoNodeCluster();

  /// Node `i`'s (0 or 1) host name ("tnode0") and address on the bridge.
  std::string node(int i) const { return "tnode" + std::to_string(i); }
  const std::string& address(int i) const { return address_[i]; }
  /// The login node's address on the bridge (where slurmctld listens).
  const std::string& login_address() const { return login_address_; }

 private:
  TwoNodeCluster() = default;
  absl::Status MakeNetwork();
  absl::Status Launch();

  std::string bridge_, login_address_;
  std::string ns_[2], veth_[2], address_[2];
};

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_CLUSTER_TWO_NODE_CLUSTER_H_
