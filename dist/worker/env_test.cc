// ReadWorkerEnv against env:// as launchers set it and as people export it by hand: every variable, the
// loopback rule for LOCAL_*, and errors that list every problem with a fix. The engines' own variables are
// dist/engines/'s (engines_test.cc).
#include "dist/worker/env.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

EnvVars Launched() {
  return {{"RANK", "5"},       {"WORLD_SIZE", "8"},          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"},    {"MASTER_ADDR", "10.1.2.3"},
          {"MASTER_PORT", "29511"}};
}

TEST(ReadWorkerEnv, ReadsEveryVariableTheLauncherSets) {
  EnvVars vars = Launched();
  vars[kLauncherStoreEnv] = "1";
  auto env = ReadWorkerEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->master_addr, "10.1.2.3");
  EXPECT_EQ(env->master_port, 29511);
  EXPECT_TRUE(env->launcher_hosts_store);
  EXPECT_EQ(env->source, "env://");
  EXPECT_EQ(env->DebugString(), "rank 5/8 (local 1/4, node 1) store 10.1.2.3:29511 hosted by the launcher [env://]");
}

TEST(ReadWorkerEnv, HandStartedRanksWithALoopbackStoreAreAllOnThisMachine) {
  for (const char* loopback : {"localhost", "127.0.0.1", "::1"}) {
    auto env = ReadWorkerEnv({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", loopback}, {"MASTER_PORT", "1234"}});
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_EQ(env->local_rank, 2) << loopback;
    EXPECT_EQ(env->local_world_size, 3) << loopback;
    EXPECT_EQ(env->group_rank, 0) << loopback;
    EXPECT_FALSE(env->launcher_hosts_store);
  }
}

TEST(ReadWorkerEnv, HandStartedRanksWithARemoteStoreAreOneProcessPerMachine) {
  auto env = ReadWorkerEnv({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 0) << "cuda:0 on the second machine, not cuda:1";
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_EQ(env->group_rank, 1);
}

TEST(ReadWorkerEnv, ListsEveryMissingVariableAtOnce) {
  auto env = ReadWorkerEnv({{"RANK", "0"}, {"LOCAL_RANK", "0"}});
  ASSERT_TRUE(absl::IsInvalidArgument(env.status())) << env.status();
  const std::string m(env.status().message());
  for (const char* missing : {"WORLD_SIZE is missing", "MASTER_ADDR is missing", "MASTER_PORT is missing",
                              "LOCAL_WORLD_SIZE is missing"}) {
    EXPECT_TRUE(Contains(m, missing)) << "expected '" << missing << "' in:\n" << m;
  }
  EXPECT_FALSE(Contains(m, "RANK is missing")) << m;
  EXPECT_TRUE(Contains(m, "launch --nproc_per_node")) << "the error must say how to fix it:\n" << m;
}

TEST(ReadWorkerEnv, RejectsMalformedAndInconsistentValues) {
  EnvVars vars = Launched();
  vars["MASTER_PORT"] = "29x";
  auto env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "MASTER_PORT='29x' is not an integer")) << env.status();

  vars = Launched();
  vars["RANK"] = "8";
  vars["LOCAL_RANK"] = "4";
  env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "RANK=8 must be in [0, WORLD_SIZE=8)")) << env.status();
  EXPECT_TRUE(Contains(std::string(env.status().message()), "LOCAL_RANK=4")) << env.status();

  vars = Launched();
  vars["MASTER_PORT"] = "0";
  env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "MASTER_PORT=0")) << env.status();
}

TEST(ReadWorkerEnv, ReadsTheRestartRoundAndRefusesGarbage) {
  EnvVars vars = Launched();
  EXPECT_EQ(ReadWorkerEnv(vars)->restart_count, 0) << "a first start";
  vars[kRestartCountEnv] = "2";
  EXPECT_EQ(ReadWorkerEnv(vars)->restart_count, 2);
  vars[kRestartCountEnv] = "two";
  auto env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "TINYDDP_RESTART_COUNT=two is not a number"))
      << env.status();
}

TEST(IsWorker, IsTrueOnlyWithRankOrWorldSize) {
  EXPECT_FALSE(IsWorker(EnvVars{{"HOME", "/root"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}}))
      << "an engine's own variables are translated by the programs that understand them (dist/engines/)";
  EXPECT_TRUE(IsWorker(EnvVars{{"RANK", "0"}}));
  EXPECT_TRUE(IsWorker(EnvVars{{"WORLD_SIZE", "2"}}));
}

}  // namespace
}  // namespace tinyddp::dist
