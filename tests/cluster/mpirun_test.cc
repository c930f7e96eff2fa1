// tinyddp under a real Open MPI mpirun (Debian's openmpi-bin 4.1) on this machine: ranks read Open MPI's
// contract (OMPI_COMM_WORLD_*, the store's address from -x MASTER_ADDR -x MASTER_PORT), say how to pass
// the address when it is missing, and `mpirun -np 2 ddp_mlp` ends with the same weights, bit for bit, as
// `launch --nproc_per_node=2 ddp_mlp`. Skipped, with the reason, when mpirun is not on PATH
// (tools/install_cluster_engines.sh installs it).
#include <unistd.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/cluster/engines.h"

namespace tinyddp::testing {
namespace {

using std::chrono::seconds;

class Mpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why_not = WhyEnginesCannotRun({"mpirun"}, {});
    if (!why_not.empty()) GTEST_SKIP() << why_not;
    dir_ = dist::testing::MakeTempDir();
    port_ = FreePort();
  }

  // mpirun -np 2 on this machine, the store's address passed on with -x as docs/clusters.md shows.
  CommandResult Run(const std::vector<std::string>& program, bool pass_store = true) {
    std::vector<std::string> argv = {FindProgram("mpirun"), "-np", "2", "--oversubscribe", "--bind-to", "none"};
    if (pass_store) {
      argv.insert(argv.end(), {"-x", "MASTER_ADDR=127.0.0.1", "-x", absl::StrCat("MASTER_PORT=", port_)});
    }
    argv.insert(argv.end(), program.begin(), program.end());
    Env env = {{"TMPDIR", "/tmp"}};  // Open MPI's session folder: Unix socket paths must stay short
    if (::geteuid() == 0) {
      env.insert(env.end(), {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
    }
    return RunCommand(argv, env, dir_, seconds(180));
  }

  std::string dir_;
  int port_ = 0;
};

TEST_F(Mpirun, RanksReadOpenMpisContract) {
  const CommandResult r = Run({Runfile("tests/cluster/cluster_probe")});
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  auto ranks = ProbeLines(r.out);
  ASSERT_EQ(ranks.size(), 2u) << r.Explain();
  for (int rank : {0, 1}) {
    auto& p = ranks[rank];
    EXPECT_EQ(p["source"], "Open_MPI") << r.out;
    EXPECT_EQ(p["world"], "2");
    EXPECT_EQ(p["local_rank"], std::to_string(rank)) << "OMPI_COMM_WORLD_LOCAL_RANK";
    EXPECT_EQ(p["local_world"], "2") << "OMPI_COMM_WORLD_LOCAL_SIZE";
    EXPECT_EQ(p["master"], absl::StrCat("127.0.0.1:", port_));
    EXPECT_EQ(p["backend"], AutoBackend(2));
    EXPECT_EQ(p["sum"], "3");
  }
}

TEST_F(Mpirun, WithoutTheStoreAddressEveryRankSaysHowToPassIt) {
  const CommandResult r = Run({Runfile("tests/cluster/cluster_probe")}, /*pass_store=*/false);
  EXPECT_NE(r.exit_code, 0) << r.Explain();
  EXPECT_TRUE(absl::StrContains(r.out + r.err, "MASTER_ADDR is missing")) << r.Explain();
  EXPECT_TRUE(absl::StrContains(r.out + r.err, "mpirun -x MASTER_ADDR=")) << r.Explain();
}

TEST_F(Mpirun, TwoRanksTrainTheSameWeightsAsLaunch) {
  const CommandResult r = Run(TinyJobUnder({}, dir_ + "/mpirun"));
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  EXPECT_EQ(CompareCheckpoints(ReferenceCheckpoint(), LatestCheckpoint(dir_ + "/mpirun")), "") << r.Explain();
}

}  // namespace
}  // namespace tinyddp::testing
