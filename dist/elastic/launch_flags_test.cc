// ParseLaunchArgs: torchrun's flag forms (dashes or underscores, =value or a separate value),
// PROGRAM's arguments passed through untouched, and errors that name the bad flag.
#include "dist/elastic/launch_flags.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(ParseLaunchArgs, ReadsFlagsInBothFormsAndStopsAtProgram) {
  auto o = ParseLaunchArgs({"--nproc-per-node", "3", "--nnodes=2", "--node_rank=1", "--master-addr", "10.9.8.7",
                            "--master_port=29511", "--tee", "3", "./train", "--lr=0.1", "--nnodes=7", "x"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, "3");
  EXPECT_EQ(o->nnodes, 2);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->master_addr, "10.9.8.7");
  EXPECT_EQ(o->master_port, 29511);
  EXPECT_TRUE(o->prefix_output);
  EXPECT_EQ(o->program, (std::vector<std::string>{"./train", "--lr=0.1", "--nnodes=7", "x"}));
}

TEST(ParseLaunchArgs, EveryNprocPerNodeSpellingWorks) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--nproc_per_node=gpu", "p"}, {"--nproc-per-node=gpu", "p"}, {"--nproc_per_node", "gpu", "p"},
           {"--nproc-per-node", "gpu", "p"}, {"-nproc-per-node=gpu", "p"}}) {
    auto o = ParseLaunchArgs(args);
    ASSERT_TRUE(o.ok()) << args[0] << ": " << o.status();
    EXPECT_EQ(o->nproc_per_node, "gpu") << args[0];
    EXPECT_EQ(o->program, (std::vector<std::string>{"p"})) << args[0];
  }
}

TEST(ParseLaunchArgs, EveryCallStartsFromTheDefaults) {
  ASSERT_TRUE(ParseLaunchArgs({"--nnodes=2", "--node_rank=1", "--prefix_output", "p"}).ok());
  auto o = ParseLaunchArgs({"p"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nnodes, 1);
  EXPECT_EQ(o->node_rank, 0);
  EXPECT_FALSE(o->prefix_output);
  EXPECT_EQ(o->nproc_per_node, "1");
}

TEST(ParseLaunchArgs, DoubleDashEndsTheFlags) {
  auto o = ParseLaunchArgs({"--prefix_output", "--", "--weird-program-name", "a"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->program, (std::vector<std::string>{"--weird-program-name", "a"}));
  EXPECT_EQ(o->master_port, -1) << "unset: the launcher picks the default";
}

TEST(ParseLaunchArgs, TeeTakesTorchrunsValues) {
  for (const char* tee : {"--tee=3", "--tee=1", "--tee=0:3,1:1"}) {
    auto o = ParseLaunchArgs({tee, "p"});
    ASSERT_TRUE(o.ok()) << tee << ": " << o.status();
    EXPECT_TRUE(o->prefix_output) << tee;
  }
  auto none = ParseLaunchArgs({"--tee=0", "p"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->prefix_output);
  // A bare --tee takes PROGRAM as its value, as in torchrun: say so instead of running nothing.
  auto bare = ParseLaunchArgs({"--tee", "./train"});
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("--tee=./train: expected 0, 1, 2, 3"), std::string::npos) << bare.status();
}

TEST(ParseLaunchArgs, RejectsBadFlagsWithTheirName) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nprocs=2", "prog"}, "launch: unknown flag --nprocs"},
      {{"--nnodes=2", "--node_rank=2", "prog"}, "--node_rank=2 must be below --nnodes=2"},
      {{"--master_port=70000", "prog"}, "--master_port=70000 must be an integer in [-1, 65535]"},
      {{"--nnodes=two", "prog"}, "--nnodes=two: expected an integer"},
      {{"--nnodes=2", "--master_port=0", "prog"}, "--master_port=0 (pick a free port) only works with one node"},
      {{"--nnodes=2"}, "no PROGRAM given"},
      {{"--nnodes"}, "--nnodes needs a value"},
  };
  for (const auto& [args, want] : cases) {
    auto o = ParseLaunchArgs(args);
    ASSERT_FALSE(o.ok()) << args[0];
    EXPECT_NE(o.status().message().find(want), std::string::npos) << o.status();
    EXPECT_NE(o.status().message().find("usage: launch"), std::string::npos) << "the usage follows the error";
  }
}

TEST(ParseLaunchArgs, HelpAndCheckNeedNoProgram) {
  auto check = ParseLaunchArgs({"--check"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_TRUE(check->check);
  auto help = ParseLaunchArgs({"--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_TRUE(help->help);
  const std::string usage = LaunchUsage();
  EXPECT_NE(usage.find("  --nproc_per_node"), std::string::npos) << usage;
  EXPECT_NE(usage.find("[default: \"1\"]"), std::string::npos) << usage;
}

TEST(ParseLaunchArgs, TakesTheProgramsOwnTimeoutWhenLaunchHasNone) {
  ::unsetenv("TINYDDP_TIMEOUT");
  auto program = ParseLaunchArgs({"./train", "--epochs=2", "--timeout=20s"});
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->timeout, std::chrono::seconds(20));
  EXPECT_EQ(program->timeout_source, "the program's --timeout");
  auto separate = ParseLaunchArgs({"./train", "--timeout", "1m"});
  ASSERT_TRUE(separate.ok()) << separate.status();
  EXPECT_EQ(separate->timeout, std::chrono::minutes(1));
  auto own = ParseLaunchArgs({"--timeout=5m", "./train", "--timeout=20s"});
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->timeout, std::chrono::minutes(5)) << "launch's own --timeout wins";
  EXPECT_EQ(own->timeout_source, "--timeout");
  auto none = ParseLaunchArgs({"./train"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->timeout, std::chrono::minutes(5));
  EXPECT_EQ(none->timeout_source, "the default");
}

TEST(ParseLaunchArgs, ARelativeProgramPathIsTheOneTypedWhereBazelRunStarted) {
  ::setenv("BUILD_WORKING_DIRECTORY", "/home/me/tinyddp", 1);
  auto typed = ParseLaunchArgs({"bazel-bin/examples/all_reduce_demo", "bazel-bin/not/this/one"});
  auto absolute = ParseLaunchArgs({"/opt/train"});
  auto bare = ParseLaunchArgs({"python3", "train.py"});
  ::unsetenv("BUILD_WORKING_DIRECTORY");
  ASSERT_TRUE(typed.ok() && absolute.ok() && bare.ok());
  EXPECT_EQ(typed->program, (std::vector<std::string>{"/home/me/tinyddp/bazel-bin/examples/all_reduce_demo",
                                                      "bazel-bin/not/this/one"}));
  EXPECT_EQ(absolute->program[0], "/opt/train");
  EXPECT_EQ(bare->program[0], "python3") << "a bare name is looked up in PATH, as a shell does";
}

TEST(ParseLaunchArgs, PreemptGraceIsThirtySecondsUnlessGiven) {
  auto o = ParseLaunchArgs({"p"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preempt_grace_seconds, 30) << "Slurm's KillWait and Kubernetes' terminationGracePeriodSeconds";
  o = ParseLaunchArgs({"--preempt_grace=90", "p"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preempt_grace_seconds, 90);
  EXPECT_EQ(o->grace_seconds, 5) << "a failure's grace is another";
  EXPECT_FALSE(ParseLaunchArgs({"--preempt_grace=-1", "p"}).ok());
}

TEST(ParseLaunchArgs, StandaloneIsTorchrunsOneNodeJob) {
  auto o = ParseLaunchArgs({"--standalone", "--nproc_per_node=2", "p"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nnodes, 1);
  EXPECT_EQ(o->master_addr, "127.0.0.1");
  EXPECT_EQ(o->master_port, -1) << "a free port";
  EXPECT_FALSE(ParseLaunchArgs({"--standalone", "--nnodes=2", "p"}).ok());
}

TEST(ParseLaunchArgs, ReadsTorchrunsPetVariablesAndFlagsWin) {
  const EnvVars pod = {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_NPROC_PER_NODE", "4"},
                       {"PET_MASTER_ADDR", "job-master-0"}, {"PET_MASTER_PORT", "23456"}};
  auto o = ParseLaunchArgs({"p"}, pod);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nnodes, 2);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->nproc_per_node, "4");
  EXPECT_EQ(o->master_addr, "job-master-0");
  EXPECT_EQ(o->master_port, 23456);
  o = ParseLaunchArgs({"--nproc_per_node=gpu", "p"}, pod);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, "gpu");
  EXPECT_FALSE(ParseLaunchArgs({"p"}, {{"PET_NNODES", "1:4"}}).ok()) << "an elastic range";
}

}  // namespace
}  // namespace tinyddp::dist
