// tinyddp under a real Slurm (Debian's slurm-wlm 22.05, on a one-node cluster this test starts for itself:
// slurm_cluster.h): srun's tasks read Slurm's contract (rank, local rank, the store on the first host of the
// node list) and pick their backend; `srun -n2 ddp_mlp` and `sbatch --wait` of the sample script
// examples/cluster/ddp_mlp_cpu.sbatch end with the same weights, bit for bit, as
// `launch --nproc_per_node=2 ddp_mlp`. Skipped, with the reason, without root or without the engines
// (tools/install_cluster_engines.sh installs them).
#include <netdb.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/cluster/engines.h"
#include "tests/cluster/slurm_cluster.h"

namespace tinyddp::testing {
namespace {

using std::chrono::seconds;

class Slurm : public ::testing::Test {
 protected:
  // One cluster for the whole suite: starting one takes a few seconds.
  static void SetUpTestSuite() {
    why_not_ = new std::string(WhyEnginesCannotRun(SlurmCluster::Clients(), SlurmCluster::Daemons()));
    if (!why_not_->empty()) return;
    auto cluster = SlurmCluster::Start();
    if (!cluster.ok()) {
      start_error_ = new std::string(cluster.status().ToString());
      return;
    }
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!why_not_->empty()) GTEST_SKIP() << *why_not_;
    ASSERT_EQ(start_error_, nullptr) << "the test cluster did not start: " << *start_error_;
    dir_ = dist::testing::MakeTempDir();
  }

  // Client commands get this cluster's SLURM_CONF and nothing of an enclosing job's.
  CommandResult Run(const std::vector<std::string>& argv, const Env& more = {}) {
    Env env = cluster_->ClientEnv();
    env.insert(env.end(), more.begin(), more.end());
    return RunCommand(argv, env, dir_, seconds(180));
  }

  static std::string* why_not_;
  static std::string* start_error_;
  static SlurmCluster* cluster_;
  std::string dir_;
};
std::string* Slurm::why_not_ = nullptr;
std::string* Slurm::start_error_ = nullptr;
SlurmCluster* Slurm::cluster_ = nullptr;

bool Resolves(const std::string& host) {
  addrinfo* list = nullptr;
  const bool ok = ::getaddrinfo(host.c_str(), nullptr, nullptr, &list) == 0;
  if (list != nullptr) ::freeaddrinfo(list);
  return ok;
}

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
  std::vector<std::string> argv = {FindProgram("srun"), "-n2", "--kill-on-bad-exit=1", Runfile("examples/ddp_mlp")};
  for (const std::string& flag : TinyJob(dir_ + "/srun")) argv.push_back(flag);
  // No job secret: a one-node job runs without one.
  const CommandResult r = Run(argv);
  ASSERT_EQ(r.exit_code, 0) << r.Explain();
  EXPECT_EQ(CompareCheckpoints(ReferenceCheckpoint(), LatestCheckpoint(dir_ + "/srun")), "") << r.Explain();
}

TEST_F(Slurm, SbatchWaitOfTheSampleCpuScriptTrainsTheSameWeightsAsLaunch) {
  // What a user types, with the program and the checkpoint folder given as the script's variables, and
  // the job's log beside them.
  std::vector<std::string> argv = {FindProgram("sbatch"), "--wait", "--output=" + dir_ + "/job-%j.out",
                                   Runfile("examples/cluster/ddp_mlp_cpu.sbatch")};
  std::vector<std::string> flags = TinyJob("unused");
  flags.pop_back();  // the script passes --checkpoint_dir itself
  argv.insert(argv.end(), flags.begin(), flags.end());
  const CommandResult r = Run(argv, {{"TINYDDP_PROGRAM", Runfile("examples/ddp_mlp")},
                                     {"TINYDDP_CHECKPOINT_DIR", dir_ + "/sbatch"}});
  std::string log;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (absl::StartsWith(entry.path().filename().string(), "job-")) log += dist::testing::ReadFile(entry.path());
  }
  ASSERT_EQ(r.exit_code, 0) << r.Explain() << "\njob log:\n" << log;
  EXPECT_TRUE(absl::StrContains(log, "2 ranks")) << log;
  EXPECT_EQ(CompareCheckpoints(ReferenceCheckpoint(), LatestCheckpoint(dir_ + "/sbatch")), "") << log;
}

}  // namespace
}  // namespace tinyddp::testing
