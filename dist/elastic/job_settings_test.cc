// CompareJobSettings on the records JobSettingsRecord writes: equal settings agree (also across machines
// whose program lives in different folders), and the first difference is named with both values.
#include "dist/elastic/job_settings.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

LaunchOptions Options() {
  LaunchOptions o;
  o.nnodes = 2;
  o.max_restarts = 1;
  o.timeout = std::chrono::seconds(20);
  o.program = {"/home/a/bazel-bin/examples/ddp_mlp", "--epochs=3"};
  return o;
}

TEST(CompareJobSettings, TheSameSettingsAgreeWhereverTheProgramLives) {
  LaunchOptions other = Options();
  other.node_rank = 1;
  other.master_addr = "10.0.0.1";
  other.program[0] = "/scratch/b/ddp_mlp";
  EXPECT_EQ(CompareJobSettings(JobSettingsRecord(Options(), 4), 0, JobSettingsRecord(other, 4), 1), "");
}

TEST(CompareJobSettings, NamesTheFirstDifferenceWithBothValues) {
  const std::string mine = JobSettingsRecord(Options(), 4);
  auto differing = [&](auto change, int nproc = 4) {
    LaunchOptions o = Options();
    change(o);
    return CompareJobSettings(mine, 0, JobSettingsRecord(o, nproc), 1);
  };
  const std::string nnodes = differing([](LaunchOptions& o) { o.nnodes = 3; });
  EXPECT_EQ(nnodes.rfind("the launchers disagree on --nnodes: node 0 has 2, node 1 has 3; start every node's", 0), 0u)
      << nnodes;
  EXPECT_NE(differing([](LaunchOptions&) {}, 8).find("--nproc_per_node: node 0 has 4, node 1 has 8"),
            std::string::npos);
  EXPECT_NE(differing([](LaunchOptions& o) { o.max_restarts = 0; }).find("--max_restarts: node 0 has 1, node 1 has 0"),
            std::string::npos);
  EXPECT_NE(differing([](LaunchOptions& o) {
              o.timeout = std::chrono::minutes(5);
            }).find("--timeout (launch's, else the program's, else TINYDDP_TIMEOUT): node 0 has 20s, node 1 has 5m"),
            std::string::npos);
  EXPECT_NE(differing([](LaunchOptions& o) {
              o.program[1] = "--epochs=4";
            }).find("the program: node 0 has ddp_mlp --epochs=3, node 1 has ddp_mlp --epochs=4"),
            std::string::npos);
}

}  // namespace
}  // namespace tinyddp::dist
