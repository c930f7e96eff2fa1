// ReadWorkerEnv against each engine's variables, as the engine sets them (Slurm 22.05's srun and sbatch
// and Open MPI 4.1's mpirun as captured on a one-node cluster; MPICH's Hydra, Kubeflow's training
// operator and Trainer, Volcano and torchrun as their sources and documentation give them): which
// engine is read, precedence between them, contradictions, and errors that list every problem with a
// fix. tests/cluster/ runs the real engines.
#include "dist/engines/engines.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

EnvVars Launched() {
  return {{"RANK", "5"},       {"WORLD_SIZE", "8"},          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"},    {"MASTER_ADDR", "10.1.2.3"},
          {"MASTER_PORT", "29511"}};
}

// Task 3 of `srun -N2 -n4 PROGRAM` in job 4242 (the variables srun 22.05 sets for a step's task).
EnvVars SrunTask() {
  return {{"SLURM_JOB_ID", "4242"},          {"SLURM_JOBID", "4242"},
          {"SLURM_STEP_ID", "0"},            {"SLURM_STEPID", "0"},
          {"SLURM_PROCID", "3"},             {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},             {"SLURM_NTASKS", "4"},
          {"SLURM_NPROCS", "4"},             {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NUM_NODES", "2"},     {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"}, {"SLURM_JOB_NODELIST", "localhost,gpu02"},
          {"SLURM_STEP_NODELIST", "localhost,gpu02"}, {"SLURM_NODELIST", "localhost,gpu02"},
          {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.9"}, {"SLURM_SRUN_COMM_HOST", "10.0.0.9"},
          {"SLURMD_NODENAME", "gpu02"},      {"SLURM_GTIDS", "2,3"}};
}

// Plain env:// is the core's (dist/worker/env_test.cc tests its reading); this wing only hands it over.
TEST(ReadEngineEnv, LeavesPlainEnvVarsToTheCoreReaderAndReadsTheLaunchersVariablesAsItDoes) {
  EnvVars vars = Launched();
  vars[kLauncherStoreEnv] = "1";
  vars[kRestartCountEnv] = "2";
  auto ours = ReadEngineEnv(vars);
  auto core = ReadWorkerEnv(vars);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ(ours->DebugString(), core->DebugString());
  EXPECT_EQ(ours->restart_count, 2);
  vars["RANK"] = "8";
  EXPECT_EQ(ReadEngineEnv(vars).status(), ReadWorkerEnv(vars).status());
  // An engine's rank reads the launcher's variables the same way (ReadLauncherVariables).
  EnvVars srun = SrunTask();
  srun[kRestartCountEnv] = "two";
  auto env = ReadEngineEnv(srun);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "TINYDDP_RESTART_COUNT=two is not a number"))
      << env.status();
}

// ---- Slurm ---------------------------------------------------------------------------------------------

TEST(ReadEngineEnv, SlurmStoreIsOnTheStepsFirstNodeNotWhereSrunRuns) {
  // Under salloc on a login node, srun (SLURM_LAUNCH_NODE_IPADDR) runs on the login node; task 0 runs on
  // the first node of the step.
  auto env = ReadEngineEnv(SrunTask());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kSlurm));
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->master_addr, "localhost");
  EXPECT_EQ(env->master_port, 20000 + 4242 % 20000);
}

TEST(ReadEngineEnv, SlurmFallsBackToTheLaunchNodeWhenTheFirstHostDoesNotResolveAndSaysSo) {
  EnvVars vars = SrunTask();
  vars["SLURM_STEP_NODELIST"] = "nosuchnode-tinyddp[01-04,07]";
  vars["SLURM_LOCALID"] = "0";
  vars["SLURM_PROCID"] = "2";
  CaptureStderr();
  auto env = ReadEngineEnv(vars);
  const std::string err = GetCapturedStderr();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "10.0.0.9");
  EXPECT_TRUE(Contains(err, "nosuchnode-tinyddp01")) << err;
  EXPECT_TRUE(Contains(err, "does not resolve")) << err;
  EXPECT_TRUE(Contains(err, "SLURM_LAUNCH_NODE_IPADDR=10.0.0.9")) << err;
}

TEST(ReadEngineEnv, SlurmStepNodeListWinsOverTheJobsAndMasterAddrWinsOverBoth) {
  EnvVars vars = SrunTask();
  vars["SLURM_JOB_NODELIST"] = "gpu[01-08]";  // the step runs on a subset that starts elsewhere
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "localhost");
  vars.erase("SLURM_STEP_NODELIST");
  vars["SLURM_JOB_NODELIST"] = "localhost,gpu[02-08]";
  env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "localhost");

  vars["MASTER_ADDR"] = "node001";
  vars["MASTER_PORT"] = "29555";
  env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "node001");
  EXPECT_EQ(env->master_port, 29555);
}

TEST(ReadEngineEnv, SlurmStepsTaskCountWinsOverTheAllocationsWithCompressedTaskLists) {
  EnvVars vars = SrunTask();
  vars["SLURM_NTASKS"] = "16";
  vars["SLURM_STEP_NUM_TASKS"] = "7";
  vars["SLURM_STEP_TASKS_PER_NODE"] = "3(x2),1";
  vars["SLURM_PROCID"] = "6";
  vars["SLURM_LOCALID"] = "0";
  vars["SLURM_NODEID"] = "2";
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->world_size, 7) << "the step's task count wins over the allocation's";
  EXPECT_EQ(env->local_world_size, 1) << "node 2's entry of 3(x2),1";
}

TEST(ReadEngineEnv, SlurmBatchScriptItselfIsNotARank) {
  // What `sbatch -n2 script.sh` gives the script: SLURM_PROCID=0 and the job's task count, but no step.
  EnvVars batch = {{"SLURM_JOB_ID", "2"},       {"SLURM_PROCID", "0"},        {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "0"},       {"SLURM_NTASKS", "2"},        {"SLURM_NPROCS", "2"},
                   {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "vm"}, {"SLURM_NODELIST", "vm"},
                   {"SLURM_GTIDS", "0"}};
  EXPECT_FALSE(IsEngineRank(batch)) << "a program the script runs without srun starts its own ranks";
}

TEST(ReadEngineEnv, ExportsThatAgreeWithSlurmAreFineAndOnesThatContradictItAreNamed) {
  // The common recipe: export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS.
  EnvVars vars = SrunTask();
  vars["RANK"] = "3";
  vars["LOCAL_RANK"] = "1";
  vars["WORLD_SIZE"] = "4";
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kSlurm));
  EXPECT_EQ(env->local_world_size, 2) << "from Slurm: LOCAL_WORLD_SIZE was not exported";

  vars["WORLD_SIZE"] = "8";  // a stale export from an older version of the script
  env = ReadEngineEnv(vars);
  ASSERT_TRUE(absl::IsInvalidArgument(env.status())) << env.status();
  const std::string m(env.status().message());
  EXPECT_TRUE(Contains(m, "WORLD_SIZE=8 but SLURM_STEP_NUM_TASKS=4")) << m;
  EXPECT_TRUE(Contains(m, "remove them")) << m;
}

TEST(ReadEngineEnv, WorkersOfALauncherUnderSrunReadTheLaunchersVariables) {
  for (const char* marker : {"TINYDDP_LAUNCHER_STORE", "TORCHELASTIC_RUN_ID"}) {
    EnvVars vars = SrunTask();  // srun started the launcher: its SLURM_* describe the launcher
    for (const auto& [name, value] : Launched()) vars[name] = value;
    vars[marker] = "1";
    auto env = ReadEngineEnv(vars);
    ASSERT_TRUE(env.ok()) << marker << ": " << env.status();
    EXPECT_EQ(env->source, EnvSourceName(EnvSource::kEnvVars)) << marker;
    EXPECT_EQ(env->rank, 5) << marker;
    EXPECT_EQ(env->local_world_size, 4) << marker;
  }
}

// ---- MPI -----------------------------------------------------------------------------------------------

// Rank 3 of `mpirun -np 4 -x MASTER_ADDR=h0 -x MASTER_PORT=29500` on two hosts (Open MPI 4.1).
EnvVars MpirunRank() {
  return {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"OMPI_MCA_ess_base_jobid", "630063105"},
          {"OMPI_MCA_orte_ess_num_procs", "4"}, {"PMIX_RANK", "3"},
          {"OMPI_COMMAND", "ddp_mlp"}};
}

TEST(ReadEngineEnv, ReadsOpenMpiButRequiresTheStoreAddress) {
  EnvVars vars = MpirunRank();
  auto env = ReadEngineEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "MASTER_ADDR is missing")) << env.status();
  EXPECT_TRUE(Contains(std::string(env.status().message()), "mpirun -x MASTER_ADDR")) << env.status();
  vars["MASTER_ADDR"] = "h0";
  vars["MASTER_PORT"] = "29500";
  env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kOpenMpi));
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 1);
}

TEST(ReadEngineEnv, MpirunInsideAnSbatchScriptReadsOpenMpiNotTheBatchStep) {
  EnvVars vars = MpirunRank();
  vars["MASTER_ADDR"] = "h0";
  vars["MASTER_PORT"] = "29500";
  // mpirun starts its daemons through srun: each rank inherits the daemon step's SLURM_* (one task per node).
  for (const auto& [name, value] : SrunTask()) vars[name] = value;
  vars["SLURM_PROCID"] = "1";
  vars["SLURM_STEP_NUM_TASKS"] = "2";
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kOpenMpi));
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
}

TEST(ReadEngineEnv, ReadsMpichHydraWithItsLocalRankVariables) {
  // Rank 5 of `mpiexec -n 8 -ppn 4 -genv MASTER_ADDR h0 -genv MASTER_PORT 29500` (MPICH 4, Intel MPI).
  EnvVars vars = {{"PMI_RANK", "5"},        {"PMI_SIZE", "8"},          {"PMI_FD", "7"},
                  {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"},   {"MASTER_ADDR", "h0"},
                  {"MASTER_PORT", "29500"}, {"HYDRA_CONTROL_FD", "9"}};
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kMpich));
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->group_rank, 1);

  // Without the local variables (an old Hydra) and a loopback store: every rank is on this machine.
  vars = {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);

  vars.erase("MASTER_ADDR");
  env = ReadEngineEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "mpiexec -genv MASTER_ADDR")) << env.status();
}

TEST(ReadEngineEnv, SlurmsOwnPmiIsReadAsSlurm) {
  EnvVars vars = SrunTask();  // srun --mpi=pmi2 adds PMI_RANK/PMI_SIZE, never MPI_LOCALRANKID
  vars["PMI_RANK"] = "3";
  vars["PMI_SIZE"] = "4";
  vars["PMI_FD"] = "5";
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kSlurm));
  EXPECT_EQ(env->local_world_size, 2);
}

// ---- Kubernetes ----------------------------------------------------------------------------------------

// What every pod gets from the kubelet.
void AddPodVariables(EnvVars& vars) {
  vars["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
  vars["KUBERNETES_SERVICE_PORT"] = "443";
  vars["KUBERNETES_PORT"] = "tcp://10.96.0.1:443";
  vars["HOSTNAME"] = "mnist-worker-0";
}

// Worker 0 (rank 1) of a PyTorchJob with one Master and one Worker replica, nprocPerNode 1 (Kubeflow
// training operator 1.7+, pkg/controller.v1/pytorch/envvar.go and master.go).
EnvVars PyTorchJobPod() {
  EnvVars vars = {{"MASTER_ADDR", "mnist-master-0"},     {"MASTER_PORT", "23456"},
                  {"PET_MASTER_ADDR", "mnist-master-0"}, {"PET_MASTER_PORT", "23456"},
                  {"WORLD_SIZE", "2"},                   {"RANK", "1"},
                  {"PET_NPROC_PER_NODE", "1"},           {"PET_NODE_RANK", "1"},
                  {"PET_NNODES", "2"},                   {"PYTHONUNBUFFERED", "0"}};
  AddPodVariables(vars);
  return vars;
}

TEST(ReadEngineEnv, PyTorchJobRunsOneProcessPerPodOnItsFirstGpu) {
  auto env = ReadEngineEnv(PyTorchJobPod());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kEnvVars));
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 2);
  EXPECT_EQ(env->local_rank, 0) << "cuda:0 on a one-GPU pod, not cuda:1";
  EXPECT_EQ(env->local_world_size, 1) << "so backend auto sees one rank per GPU";
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->master_addr, "mnist-master-0");
  EXPECT_EQ(env->master_port, 23456);
}

TEST(ReadEngineEnv, RanksStartedByHandInsideOnePodWithALoopbackStoreAreAllInThatPod) {
  // A development pod, two ranks by hand: only this pod can reach a store on 127.0.0.1.
  EnvVars vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "23456"}, {"WORLD_SIZE", "2"}, {"RANK", "1"}};
  AddPodVariables(vars);
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
}

TEST(ReadEngineEnv, VolcanoPodsAreOneProcessPerPod) {
  // Volcano's pytorch plugin: MASTER_ADDR the first master pod's name, WORLD_SIZE and RANK per pod.
  EnvVars vars = {{"MASTER_ADDR", "mnist-master-0.mnist"}, {"MASTER_PORT", "23456"}, {"WORLD_SIZE", "4"},
                  {"RANK", "3"}, {"VC_WORKER_HOSTS", "mnist-worker-0.mnist,mnist-worker-1.mnist"}};
  AddPodVariables(vars);
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_EQ(env->group_rank, 3);
}

TEST(ReadEngineEnv, APodOfSeveralProcessesStartedWithoutLaunchIsRefusedWithTheFix) {
  EnvVars vars = PyTorchJobPod();  // nprocPerNode: 4 -> WORLD_SIZE = 2 pods x 4, RANK still numbers pods
  vars["PET_NPROC_PER_NODE"] = "4";
  vars["WORLD_SIZE"] = "8";
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(absl::IsInvalidArgument(env.status())) << env.status();
  const std::string m(env.status().message());
  EXPECT_TRUE(Contains(m, "PET_NPROC_PER_NODE=4")) << m;
  EXPECT_TRUE(Contains(m, "launch --nnodes=$PET_NNODES --node_rank=$PET_NODE_RANK")) << m;

  vars = PyTorchJobPod();
  vars["PET_NODE_RANK"] = "0";
  env = ReadEngineEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "RANK=1 but PET_NODE_RANK=0")) << env.status();
}

TEST(ReadEngineEnv, KubeflowTrainerPodsWithOnlyPetVariablesAreRanks) {
  // Kubeflow Trainer's torch runtime gives a pod torchrun's settings only.
  EnvVars vars = {{"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "1"}, {"PET_NODE_RANK", "1"},
                  {"PET_MASTER_ADDR", "mnist-node-0-0.mnist"}, {"PET_MASTER_PORT", "29400"}};
  AddPodVariables(vars);
  ASSERT_TRUE(IsEngineRank(vars));
  auto env = ReadEngineEnv(vars);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, EnvSourceName(EnvSource::kKubeflow));
  EXPECT_EQ(env->DebugString(), "rank 1/2 (local 0/1, node 1) store mnist-node-0-0.mnist:29400 [Kubeflow (PET_*)]");

  vars["PET_NNODES"] = "1:4";
  env = ReadEngineEnv(vars);
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(Contains(std::string(env.status().message()), "PET_NNODES=1:4 is an elastic range")) << env.status();
}

// ---- Precedence ----------------------------------------------------------------------------------------

TEST(IsEngineRank, IsFalseWithoutAnyEnginesRankVariables) {
  EXPECT_FALSE(IsEngineRank(EnvVars{{"HOME", "/root"}, {"SLURM_JOB_ID", "5"}}));
  EXPECT_TRUE(IsEngineRank(EnvVars{{"RANK", "0"}}));
  EXPECT_TRUE(IsEngineRank(SrunTask()));
  EXPECT_TRUE(IsEngineRank(EnvVars{{"OMPI_COMM_WORLD_RANK", "0"}}));
  EXPECT_TRUE(IsEngineRank(EnvVars{{"PMI_RANK", "0"}}));
  auto env = ReadEngineEnv(EnvVars{{"HOME", "/root"}});
  EXPECT_TRUE(absl::IsNotFound(env.status())) << env.status();
}

// ---- Slurm host lists ----------------------------------------------------------------------------------

std::vector<std::string> Hosts(const std::string& list) {
  auto hosts = ExpandHostlist(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

TEST(ExpandHostlist, ExpandsAsScontrolShowHostnamesDoes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Hosts("gpu[01-04,07]"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(Hosts("a-[1-2],b3"), (V{"a-1", "a-2", "b3"}));
  EXPECT_EQ(Hosts("node7"), (V{"node7"}));
  EXPECT_EQ(Hosts("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(Hosts("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(Hosts("r[1-2]n[1-2],login"), (V{"r1n1", "r1n2", "r2n1", "r2n2", "login"}));
  EXPECT_EQ(Hosts("gpu[3]-ib"), (V{"gpu3-ib"}));
  EXPECT_EQ(Hosts("dgx-a100-[012-013]")[1], "dgx-a100-013");
}

TEST(ExpandHostlist, RefusesWhatIsNotAHostList) {
  for (const char* bad : {"gpu[01-", "gpu]01[", "gpu[4-1]", "gpu[a-b]", "gpu[]", "", "n[0-99999999]"}) {
    EXPECT_FALSE(ExpandHostlist(bad).ok()) << "'" << bad << "'";
  }
}

// ---- Translation into env:// ------------------------------------------------------------------------

TEST(UseClusterEngine, TranslatesAnMpirunRankIntoEnvVarsThatTheCoreReads) {
  const EnvVars mpi = {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"MASTER_ADDR", "10.0.0.7"},         {"MASTER_PORT", "29500"}};
  for (const auto& [name, value] : mpi) ::setenv(name.c_str(), value.c_str(), 1);
  ASSERT_FALSE(IsWorker()) << "the core alone does not see an MPI rank";
  absl::StatusOr<std::string> engine = UseClusterEngine();
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(*engine, "Open MPI");
  absl::StatusOr<WorkerEnv> env = ReadWorkerEnv();  // the core's env:// reader, nothing else
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 29500);
  for (const auto& [name, value] : mpi) ::unsetenv(name.c_str());
  for (const auto& [name, value] : EnvVarsOf(*env)) ::unsetenv(name.c_str());
}

TEST(UseClusterEngine, LeavesAProcessThatNoEngineStartedAlone) {
  ASSERT_FALSE(IsEngineRank(CurrentEnvironment())) << "this test process itself runs as a rank of a job";
  absl::StatusOr<std::string> engine = UseClusterEngine();
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(*engine, "env://");
  EXPECT_FALSE(IsWorker()) << "a program run by hand still starts its own ranks";
}

}  // namespace
}  // namespace tinyddp::dist
