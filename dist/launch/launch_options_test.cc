// ParseLaunchArgs and ResolveNprocPerNode: torchrun's flag forms, PROGRAM's arguments passed through
// untouched, and errors that name the bad flag.
#include "dist/launch/launch_options.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(ParseLaunchArgs, ReadsFlagsInBothFormsAndStopsAtProgram) {
  auto o = ParseLaunchArgs({"--nproc-per-node", "3", "--nnodes=2", "--node_rank=1", "--master_addr", "10.9.8.7",
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

TEST(ParseLaunchArgs, DoubleDashEndsTheFlags) {
  auto o = ParseLaunchArgs({"--prefix_output", "--", "--weird-program-name", "a"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->program, (std::vector<std::string>{"--weird-program-name", "a"}));
  EXPECT_EQ(o->master_port, -1) << "unset: the launcher picks the default";
}

TEST(ParseLaunchArgs, RejectsBadFlagsWithTheirName) {
  auto unknown = ParseLaunchArgs({"--nprocs=2", "prog"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown flag --nprocs=2"), std::string::npos) << unknown.status();
  auto rank = ParseLaunchArgs({"--nnodes=2", "--node_rank=2", "prog"});
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("--node_rank=2 must be below --nnodes=2"), std::string::npos);
  auto port = ParseLaunchArgs({"--master_port=70000", "prog"});
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("--master_port=70000"), std::string::npos);
  EXPECT_FALSE(ParseLaunchArgs({"--nnodes=2", "--master_port=0", "prog"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"--nnodes=2"}).ok()) << "no PROGRAM";
  EXPECT_FALSE(ParseLaunchArgs({"--nnodes"}).ok()) << "a flag without its value";
  auto check = ParseLaunchArgs({"--check"});
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->check);
}

TEST(ResolveNprocPerNode, FollowsTorchrunsMeanings) {
  EXPECT_EQ(*ResolveNprocPerNode("gpu", 8, 96), 8);
  EXPECT_EQ(*ResolveNprocPerNode("cpu", 8, 96), 96);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 96), 8);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 0, 3), 3);
  EXPECT_EQ(*ResolveNprocPerNode("5", 0, 3), 5);
  auto no_gpu = ResolveNprocPerNode("gpu", 0, 3);
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_NE(no_gpu.status().message().find("no GPU"), std::string::npos);
  EXPECT_FALSE(ResolveNprocPerNode("0", 1, 1).ok());
  EXPECT_FALSE(ResolveNprocPerNode("two", 1, 1).ok());
  EXPECT_GE(UsableCpuCount(), 1);
}

}  // namespace
}  // namespace tinyddp::dist
