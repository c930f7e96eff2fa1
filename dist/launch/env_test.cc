// ReadWorkerEnv: each launcher's variables (env://, Slurm, Open MPI), precedence between them, and
// errors that list every missing or inconsistent variable with a fix.
#include "dist/launch/env.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

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
  EXPECT_EQ(env->source, EnvSource::kEnvVars);
  EXPECT_EQ(env->DebugString(), "rank 5/8 (local 1/4, node 1) store 10.1.2.3:29511 hosted by the launcher [env://]");
}

TEST(ReadWorkerEnv, HandStartedRanksWithoutLocalVariablesAreAllOnThisMachine) {
  auto env = ReadWorkerEnv({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_world_size, 3);
  EXPECT_EQ(env->group_rank, 0);
  EXPECT_FALSE(env->launcher_hosts_store);
}

TEST(ReadWorkerEnv, ListsEveryMissingVariableAtOnce) {
  auto env = ReadWorkerEnv({{"RANK", "0"}, {"LOCAL_RANK", "0"}});
  ASSERT_TRUE(absl::IsInvalidArgument(env.status())) << env.status();
  const std::string m(env.status().message());
  for (const char* missing : {"WORLD_SIZE is missing", "MASTER_ADDR is missing", "MASTER_PORT is missing",
                              "LOCAL_WORLD_SIZE is missing"}) {
    EXPECT_NE(m.find(missing), std::string::npos) << "expected '" << missing << "' in:\n" << m;
  }
  EXPECT_EQ(m.find("RANK is missing"), std::string::npos) << m;
  EXPECT_NE(m.find("launch --nproc_per_node"), std::string::npos) << "the error must say how to fix it:\n" << m;
}

TEST(ReadWorkerEnv, RejectsMalformedAndInconsistentValues) {
  EnvVars vars = Launched();
  vars["MASTER_PORT"] = "29x";
  auto env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("MASTER_PORT='29x' is not an integer"), std::string::npos) << env.status();

  vars = Launched();
  vars["RANK"] = "8";
  vars["LOCAL_RANK"] = "4";
  env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("RANK=8 must be in [0, WORLD_SIZE=8)"), std::string::npos) << env.status();
  EXPECT_NE(env.status().message().find("LOCAL_RANK=4"), std::string::npos) << env.status();

  vars = Launched();
  vars["MASTER_PORT"] = "0";
  env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("MASTER_PORT=0"), std::string::npos) << env.status();
}

TEST(ReadWorkerEnv, ReadsSlurmStepVariablesWithCompressedTaskLists) {
  EnvVars vars = {{"SLURM_PROCID", "6"},         {"SLURM_NTASKS", "16"},          {"SLURM_STEP_NUM_TASKS", "7"},
                  {"SLURM_LOCALID", "0"},        {"SLURM_NODEID", "2"},           {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"},
                  {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}, {"SLURM_JOB_ID", "123456"}};
  auto env = ReadWorkerEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSource::kSlurm);
  EXPECT_EQ(env->rank, 6);
  EXPECT_EQ(env->world_size, 7) << "the step's task count wins over the allocation's";
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1) << "node 2's entry of 3(x2),1";
  EXPECT_EQ(env->group_rank, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 20000 + 123456 % 20000);

  vars["MASTER_ADDR"] = "node001";
  vars["MASTER_PORT"] = "29555";
  env = ReadWorkerEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "node001");
  EXPECT_EQ(env->master_port, 29555);
}

TEST(ReadWorkerEnv, ReadsOpenMpiButRequiresTheStoreAddress) {
  EnvVars vars = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  auto env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("MASTER_ADDR is missing"), std::string::npos) << env.status();
  EXPECT_NE(env.status().message().find("mpirun -x MASTER_ADDR"), std::string::npos) << env.status();
  vars["MASTER_ADDR"] = "h0";
  vars["MASTER_PORT"] = "29500";
  env = ReadWorkerEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSource::kOpenMpi);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 1);
}

TEST(ReadWorkerEnv, LauncherVariablesWinOverSlurmUnderSrunLaunch) {
  EnvVars vars = Launched();
  vars["SLURM_PROCID"] = "0";
  vars["SLURM_NTASKS"] = "2";
  auto env = ReadWorkerEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSource::kEnvVars);
  EXPECT_EQ(env->rank, 5);
}

TEST(ReadWorkerEnv, ReadsTheRestartRoundAndRefusesGarbage) {
  EnvVars vars = Launched();
  EXPECT_EQ(ReadWorkerEnv(vars)->restart_count, 0) << "a first start";
  vars[kRestartCountEnv] = "2";
  EXPECT_EQ(ReadWorkerEnv(vars)->restart_count, 2);
  vars[kRestartCountEnv] = "two";
  auto env = ReadWorkerEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("TINYDDP_RESTART_COUNT=two is not a number"), std::string::npos)
      << env.status();
}

TEST(IsWorker, IsFalseWithoutAnyLauncherVariables) {
  EXPECT_FALSE(IsWorker(EnvVars{{"HOME", "/root"}, {"SLURM_JOB_ID", "5"}}));
  EXPECT_TRUE(IsWorker(EnvVars{{"RANK", "0"}}));
  EXPECT_TRUE(IsWorker(EnvVars{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));
  EXPECT_TRUE(IsWorker(EnvVars{{"OMPI_COMM_WORLD_RANK", "0"}}));
  auto env = ReadWorkerEnv(EnvVars{{"HOME", "/root"}});
  EXPECT_TRUE(absl::IsNotFound(env.status())) << env.status();
}

}  // namespace
}  // namespace tinyddp::dist
