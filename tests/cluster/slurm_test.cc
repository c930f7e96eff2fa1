// tinyddp under a real Slurm (Debian's slurm-wlm 22.05, on a one-node cluster this test starts for itself:
// slurm_cluster.h): srun's tasks read Slurm's contract (rank, local rank, the store on the first host of the
// node list) and pick their backend; `srun -n2 ddp_mlp` and `sbatch --wait` of the sample script
// examples/cluster/ddp_mlp_cpu.sbatch end with the same weights, bit for bit, as
// `launch --nproc_per_node=2 ddp_mlp`. Skipped, with the reason, without root or without the engines
// (tools/install_cluster_engines.sh installs them).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_suite.h"
#include "tests/cluster/engines.h"
#include "tests/cluster/slurm_cluster.h"

namespace tinyddp::testing {
namespace {

using Slurm = ClusterSuite<SlurmCluster>;

TEST_F(Slurm, SrunTasksReadSlurmsContractAndFindTheStoreOnTheFirstNode) {
  const CommandResult r = Run({FindProgram("srun"), "-n2", Runfile("tests/cluster/cluster_probe")});
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  auto ranks = ProbeLines(r.out);
  ASSERT_EQ(ranks.size(), 2u) << r.Explain();
  // The store is on the first host of SLURM_STEP_NODELIST: this node, by name when it resolves, else
  // (said on stderr) srun's own address, SLURM_LAUNCH_NODE_IPADDR.
  const bool resolves = Resolves(cluster_->node());
  for (int rank : {0, 1}) {
    auto& p = ranks[rank];
    EXPECT_EQ(p["source"], "Slurm") << r.out;
    EXPECT_EQ(p["world"], "2");
    EXPECT_EQ(p["local_rank"], std::to_string(rank)) << "SLURM_LOCALID";
    EXPECT_EQ(p["local_world"], "2") << "SLURM_STEP_TASKS_PER_NODE";
    EXPECT_EQ(p["node"], "0");
    EXPECT_TRUE(absl::StartsWith(p["master"], (resolves ? cluster_->node() : "127.0.0.1") + ":")) << p["master"];
    EXPECT_EQ(p["backend"], AutoBackend(2)) << "two ranks on this node";
    EXPECT_EQ(p["sum"], "3");
  }
  EXPECT_EQ(absl::StrContains(r.err, "does not resolve"), !resolves) << r.err;
}

TEST_F(Slurm, SrunTwoTasksTrainTheSameWeightsAsLaunch) {
  // No job secret: a one-node job runs without one.
  const CommandResult r = Run(TinyJobUnder({FindProgram("srun"), "-n2", "--kill-on-bad-exit=1"}, dir_ + "/srun"));
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  EXPECT_EQ(CompareCheckpoints(ReferenceCheckpoint(), LatestCheckpoint(dir_ + "/srun")), "") << r.Explain();
}

TEST_F(Slurm, SbatchWaitOfTheSampleCpuScriptTrainsTheSameWeightsAsLaunch) {
  const auto [r, log] = SbatchSampleScript({}, dir_ + "/sbatch");
  ASSERT_EQ(r.exit_code, 0) << r.Explain() << "\njob log:\n" << log;
  EXPECT_TRUE(absl::StrContains(log, "2 ranks")) << log;
  EXPECT_EQ(CompareCheckpoints(ReferenceCheckpoint(), LatestCheckpoint(dir_ + "/sbatch")), "") << log;
}

}  // namespace
}  // namespace tinyddp::testing
