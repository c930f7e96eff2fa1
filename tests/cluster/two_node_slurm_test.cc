// tinyddp across two Slurm nodes, seen from a login node (two_node_cluster.h: two network namespaces with
// their own host names and addresses, slurmctld and the client commands in this one). What a user meets
// first past one node: under `salloc` the store must be on the first host of the node list, not on the
// login node where srun runs; every name must resolve on every node; the job secret must reach both.
// `salloc -N2 srun ddp_mlp` and `sbatch -N2 --wait` of examples/cluster/ddp_mlp_cpu.sbatch each end with
// the same weights, bit for bit, as the same two-rank job on one node. Skipped, with the reason, without
// root, namespaces or the engines (tools/install_cluster_engines.sh installs them).
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_suite.h"
#include "tests/cluster/engines.h"
#include "tests/cluster/two_node_cluster.h"

namespace tinyddp::testing {
namespace {

// The same secret in every test: a fresh one per job is what the sample script does.
constexpr char kSecret[] = "5f0c2a9e7d3b41c68e2f9a1b7c4d6e80";

class TwoNodeSlurm : public ClusterSuite<TwoNodeCluster> {
 protected:
  TwoNodeSlurm() : ClusterSuite(std::chrono::seconds(120)) {}

  // The tiny job, trained by `srun -N1 -n2` on one node of this cluster: what the two-node runs must match.
  const std::string& OneNodeCheckpoint() {
    if (one_node_ == nullptr) {
      const std::string checkpoints = cluster_->dir() + "/one-node";
      const CommandResult r =
          Run(TinyJobUnder({FindProgram("srun"), "-N1", "-n2", "--kill-on-bad-exit=1"}, checkpoints));
      EXPECT_EQ(r.exit_code, 0) << "the one-node run failed:\n" << r.Explain();
      one_node_ = new std::string(LatestCheckpoint(checkpoints));
    }
    return *one_node_;
  }

  // The tiny job across both nodes, one task on each: salloc -N2, then srun from the login node.
  static std::vector<std::string> SallocTinyJob(const std::string& checkpoint_dir) {
    return TinyJobUnder({FindProgram("salloc"), "-N2", "--ntasks-per-node=1", FindProgram("srun"),
                         "--kill-on-bad-exit=1"},
                        checkpoint_dir);
  }

  static inline std::string* one_node_ = nullptr;
};

TEST_F(TwoNodeSlurm, SallocFromTheLoginNodePutsTheStoreOnTheFirstNodeNotOnTheLoginNode) {
  // srun runs here, on the login node: SLURM_LAUNCH_NODE_IPADDR is this side's address, which the
  // tasks must not dial.
  const CommandResult r = Run({FindProgram("salloc"), "-N2", "-n2", FindProgram("srun"),
                               Runfile("tests/cluster/cluster_probe")},
                              {{"TINYDDP_STORE_SECRET", kSecret}});
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  auto ranks = ProbeLines(r.out);
  ASSERT_EQ(ranks.size(), 2u) << r.Explain();
  for (int rank : {0, 1}) {
    auto& p = ranks[rank];
    EXPECT_EQ(p["source"], "Slurm") << r.out;
    EXPECT_EQ(p["world"], "2");
    EXPECT_EQ(p["local_rank"], "0") << "one task on each node";
    EXPECT_EQ(p["node"], std::to_string(rank));
    EXPECT_TRUE(absl::StartsWith(p["master"], cluster_->node(0) + ":")) << p["master"];
    EXPECT_EQ(p["sum"], "3") << "an all_reduce across both nodes";
  }
  EXPECT_FALSE(absl::StrContains(r.err, "does not resolve")) << r.err;
}

TEST_F(TwoNodeSlurm, SallocAndSrunTrainOneJobAcrossBothNodesBitIdenticalToOneNode) {
  // Exported on the login node, as a user does before salloc: srun hands it to both nodes' tasks.
  const CommandResult r = Run(SallocTinyJob(dir_ + "/two-nodes"), {{"TINYDDP_STORE_SECRET", kSecret}});
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  EXPECT_EQ(CompareCheckpoints(OneNodeCheckpoint(), LatestCheckpoint(dir_ + "/two-nodes")), "") << r.Explain();
}

TEST_F(TwoNodeSlurm, ATwoNodeJobWithoutASecretIsRefusedAndSaysHowToMakeOne) {
  const CommandResult r = Run(SallocTinyJob(dir_ + "/no-secret"));
  EXPECT_NE(r.exit_code, 0) << r.Explain();
  EXPECT_TRUE(absl::StrContains(r.out + r.err, "TINYDDP_STORE_SECRET is not set")) << r.Explain();
  EXPECT_EQ(LatestCheckpoint(dir_ + "/no-secret"), "");
}

TEST_F(TwoNodeSlurm, SbatchWaitOfTheSampleCpuScriptOnTwoNodesTrainsTheSameWeightsAsOneNode) {
  // The sample script unchanged, given two nodes of one task each on the command line (which overrides
  // its #SBATCH lines); it makes and exports the job secret itself, before srun.
  const auto [r, log] = SbatchSampleScript({"-N2", "--ntasks-per-node=1"}, dir_ + "/sbatch");
  ASSERT_EQ(r.exit_code, 0) << r.Explain() << "\njob log:\n" << log;
  EXPECT_TRUE(absl::StrContains(log, "2 ranks")) << log;
  EXPECT_TRUE(absl::StrContains(log, cluster_->node(0) + "," + cluster_->node(1)) ||
              absl::StrContains(log, "tnode[0-1]"))
      << log;
  EXPECT_EQ(CompareCheckpoints(OneNodeCheckpoint(), LatestCheckpoint(dir_ + "/sbatch")), "") << log;
}

}  // namespace
}  // namespace tinyddp::testing
