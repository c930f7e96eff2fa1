// LaunchFlagsFromEnvironment: a PyTorchJob pod's PET_* variables become launch's flags, MASTER_ADDR wins over
// PET_MASTER_ADDR, PET_RDZV_ENDPOINT fills in, and errors name the variable (as Kubeflow's training operator
// sets them: pkg/controller.v1/pytorch/envvar.go).
#include "dist/engines/pet_flags.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

EnvVars Launched() {
  return {{"RANK", "5"},       {"WORLD_SIZE", "8"},          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"},    {"MASTER_ADDR", "10.1.2.3"},
          {"MASTER_PORT", "29511"}};
}

// Worker 0 (rank 1) of a PyTorchJob with one Master and one Worker replica, nprocPerNode 1.
EnvVars PyTorchJobPod() {
  return {{"MASTER_ADDR", "mnist-master-0"},     {"MASTER_PORT", "23456"},
          {"PET_MASTER_ADDR", "mnist-master-0"}, {"PET_MASTER_PORT", "23456"},
          {"WORLD_SIZE", "2"},                   {"RANK", "1"},
          {"PET_NPROC_PER_NODE", "1"},           {"PET_NODE_RANK", "1"},
          {"PET_NNODES", "2"},                   {"PYTHONUNBUFFERED", "0"},
          {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"HOSTNAME", "mnist-worker-0"}};
}

TEST(LaunchFlagsFromEnvironment, TurnsPyTorchJobsPetVariablesIntoLaunchFlags) {
  EnvVars vars = PyTorchJobPod();
  vars["PET_NPROC_PER_NODE"] = "gpu";
  vars["PET_MAX_RESTARTS"] = "3";
  auto flags = LaunchFlagsFromEnvironment(vars);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(*flags, (std::vector<std::string>{"--nnodes=2", "--node_rank=1", "--nproc_per_node=gpu",
                                              "--master_addr=mnist-master-0", "--master_port=23456",
                                              "--max_restarts=3"}));
}

TEST(LaunchFlagsFromEnvironment, MasterAddrWinsOverPetAndRendezvousEndpointFillsIn) {
  EnvVars vars = {{"PET_NNODES", "2:2"}, {"PET_RDZV_ENDPOINT", "etcd-0:2379"}, {"PET_STANDALONE", "1"}};
  auto flags = LaunchFlagsFromEnvironment(vars);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(*flags, (std::vector<std::string>{"--nnodes=2", "--master_addr=etcd-0", "--master_port=2379",
                                              "--standalone"}));
  vars["MASTER_ADDR"] = "10.0.0.5";
  vars["PET_MASTER_ADDR"] = "ignored";
  flags = LaunchFlagsFromEnvironment(vars);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ((*flags)[1], "--master_addr=10.0.0.5");
}

TEST(LaunchFlagsFromEnvironment, NothingWithoutPetAndErrorsNameTheVariable) {
  EXPECT_TRUE(LaunchFlagsFromEnvironment(Launched())->empty()) << "MASTER_ADDR alone changes no launch flag";
  auto flags = LaunchFlagsFromEnvironment({{"PET_NODE_RANK", "one"}});
  ASSERT_FALSE(flags.ok());
  EXPECT_TRUE(Contains(std::string(flags.status().message()), "PET_NODE_RANK='one'")) << flags.status();
  flags = LaunchFlagsFromEnvironment({{"PET_NNODES", "1:3"}});
  ASSERT_FALSE(flags.ok());
  EXPECT_TRUE(Contains(std::string(flags.status().message()), "elastic")) << flags.status();
}

}  // namespace
}  // namespace tinyddp::dist
