// ClusterSuite<Cluster>: the gtest fixture of the tests that run jobs on a Slurm cluster of their own
// (Cluster: SlurmCluster, slurm_cluster.h, or TwoNodeCluster, two_node_cluster.h). Its set-up, one client
// command and the sample sbatch script were written out again in each such test; here they are written
// once, so each test file reads as what it checks:
//   - one cluster for the whole suite (starting one takes seconds), stopped after the last test;
//   - every test skips, with Cluster::WhyCannotRun()'s reason (no root, no engines), where this machine
//     cannot make the cluster, and fails, with the daemons' logs, where it did not start;
//   - each test gets a folder of its own, dir_, named after it inside the cluster's folder (which every
//     node sees, and which goes with the cluster);
//   - Run: a client command with the cluster's ClientEnv() (nothing of an enclosing job's), in dir_.
#ifndef TINYDDP_TESTS_CLUSTER_CLUSTER_SUITE_H_
#define TINYDDP_TESTS_CLUSTER_CLUSTER_SUITE_H_

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/cluster/engines.h"

namespace tinyddp::testing {

template <typename Cluster>
class ClusterSuite : public ::testing::Test {
 protected:
  /// `bound`: how long Run lets a command take before it kills it.
  explicit ClusterSuite(std::chrono::seconds bound = std::chrono::seconds(180)) : bound_(bound) {}

  static void SetUpTestSuite() {
    why_not_ = new std::string(Cluster::WhyCannotRun());
    if (!why_not_->empty()) return;
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start();
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
    dir_ = cluster_->dir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }

  /// `argv` on the login side, with the cluster's ClientEnv() and `more`.
  CommandResult Run(const std::vector<std::string>& argv, const Env& more = {}) const {
    Env env = cluster_->ClientEnv();
    env.insert(env.end(), more.begin(), more.end());
    return RunCommand(argv, env, dir_, bound_);
  }

  /// `sbatch OPTIONS --wait` of examples/cluster/ddp_mlp_cpu.sbatch, what a user types: the program and
  /// the checkpoint folder given as the script's variables, TinyJob's other flags as its arguments, and
  /// the job's log (`log`) beside them in dir_.
  struct SbatchRun {
    CommandResult result;
    std::string log;
  };
  SbatchRun SbatchSampleScript(const std::vector<std::string>& options, const std::string& checkpoint_dir) const {
    std::vector<std::string> argv = {FindProgram("sbatch")};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(),
                {"--wait", "--output=" + dir_ + "/job-%j.out", Runfile("examples/cluster/ddp_mlp_cpu.sbatch")});
    std::vector<std::string> flags = TinyJob("unused");
    flags.pop_back();  // the script passes --checkpoint_dir itself
    argv.insert(argv.end(), flags.begin(), flags.end());
    SbatchRun run;
    run.result =
        Run(argv, {{"TINYDDP_PROGRAM", Runfile("examples/ddp_mlp")}, {"TINYDDP_CHECKPOINT_DIR", checkpoint_dir}});
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (absl::StartsWith(entry.path().filename().string(), "job-")) run.log += dist::testing::ReadFile(entry.path());
    }
    return run;
  }

  static inline std::string* why_not_ = nullptr;
  static inline std::string* start_error_ = nullptr;
  static inline Cluster* cluster_ = nullptr;
  const std::chrono::seconds bound_;
  std::string dir_;
};

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_CLUSTER_CLUSTER_SUITE_H_
