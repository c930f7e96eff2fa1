// Kubernetes cannot run here, so this test gives two real processes on this machine exactly the variables
// two pods get (the kubelet's KUBERNETES_*, and the engine's: Kubeflow's training operator for a
// PyTorchJob, the indexed Job's JOB_COMPLETION_INDEX plus examples/cluster/jobset.yaml's own for a JobSet)
// and checks what each reads: its rank, local rank 0 of 1 (its pod's first GPU), node rank, the store's
// address and the backend auto picks; and that pods of several machines without TINYDDP_STORE_SECRET are
// refused with the launcher's instructions. "Pods" get a GPU of their own where this machine has two
// (CUDA_VISIBLE_DEVICES, as the device plugin gives one), none otherwise. The stand-in for the master
// pod's name is this machine's host name (a name, as the master's service is; a loopback address would
// say "every rank is on this machine", env.h).
#include <sys/types.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tests/cluster/engines.h"

namespace tinyddp::testing {
namespace {

using std::chrono::seconds;

// What the kubelet sets in every pod, and the GPU the device plugin gives pod `index` (when there are two).
Env PodVariables(int index) {
  Env env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
             {"KUBERNETES_SERVICE_PORT", "443"},
             {"KUBERNETES_PORT", "tcp://10.96.0.1:443"},
             {"HOSTNAME", absl::StrCat("ddp-mlp-pod-", index)}};
  env.emplace_back("CUDA_VISIBLE_DEVICES", cuda::DeviceCount() >= 2 ? std::to_string(index) : "");
  return env;
}

std::string ExpectedBackend() { return cuda::DeviceCount() >= 2 ? AutoBackend(1) : "gloo"; }

class Pods : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = ResolvableHostName();
    if (master_.empty()) GTEST_SKIP() << "this machine's host name does not resolve: it stands in for the master pod's";
    dir_ = dist::testing::MakeTempDir();
    port_ = FreePort();
  }
  // Starts one process per pod with its variables, waits for both (60 s at most).
  std::vector<CommandResult> RunPods(const std::vector<std::string>& argv, const std::vector<Env>& pods) {
    std::vector<pid_t> pids;
    for (size_t i = 0; i < pods.size(); ++i) {
      pids.push_back(StartCommand(argv, pods[i], dir_, absl::StrCat("pod", i)));
    }
    std::vector<CommandResult> results;
    for (size_t i = 0; i < pods.size(); ++i) {
      results.push_back(WaitCommand(pids[i], dir_, absl::StrCat("pod", i), seconds(60)));
    }
    return results;
  }
  // Worker `index` of a PyTorchJob of two pods (one Master, one Worker), nprocPerNode 1, as the training
  // operator sets them (Kubeflow 1.7+: pkg/controller.v1/pytorch/envvar.go, master.go).
  Env PyTorchJobPod(int index) const {
    Env env = PodVariables(index);
    const std::string port = std::to_string(port_);
    env.insert(env.end(), {{"MASTER_ADDR", master_},         {"MASTER_PORT", port},
                           {"PET_MASTER_ADDR", master_},     {"PET_MASTER_PORT", port},
                           {"WORLD_SIZE", "2"},              {"RANK", std::to_string(index)},
                           {"PET_NPROC_PER_NODE", "1"},      {"PET_NODE_RANK", std::to_string(index)},
                           {"PET_NNODES", "2"},              {"PYTHONUNBUFFERED", "0"}});
    return env;
  }
  void ExpectOneRankPerPod(const std::vector<CommandResult>& pods, const std::string& source) {
    for (int index : {0, 1}) {
      const CommandResult& r = pods[index];
      ASSERT_EQ(r.exit_code, 0) << "pod " << index << ": " << r.Explain();
      auto lines = ProbeLines(r.out);
      ASSERT_EQ(lines.count(index), 1u) << r.Explain();
      auto& p = lines[index];
      EXPECT_EQ(p["world"], "2");
      EXPECT_EQ(p["local_rank"], "0") << "its pod's first GPU, not cuda:" << index;
      EXPECT_EQ(p["local_world"], "1") << "one process per pod";
      EXPECT_EQ(p["node"], std::to_string(index));
      EXPECT_EQ(p["master"], absl::StrCat(master_, ":", port_));
      EXPECT_EQ(p["source"], source);
      EXPECT_EQ(p["backend"], ExpectedBackend()) << "backend auto: one rank here, and a GPU when the pod has one";
      EXPECT_EQ(p["device"], p["backend"] == "nccl" ? "cuda:0" : "cpu");
      EXPECT_EQ(p["sum"], "3");
    }
  }

  std::string master_, dir_;
  int port_ = 0;
};

TEST_F(Pods, PyTorchJobGivesEachPodOneRankOnItsOwnFirstGpu) {
  std::vector<Env> pods = {PyTorchJobPod(0), PyTorchJobPod(1)};
  for (Env& pod : pods) pod.emplace_back("TINYDDP_STORE_SECRET", "a-kubernetes-secret-for-this-test");
  ExpectOneRankPerPod(RunPods({Runfile("tests/cluster/cluster_probe")}, pods), "env://");
}

TEST_F(Pods, PodsWithoutAStoreSecretAreRefusedWithTheLaunchersInstructions) {
  const auto pods = RunPods({Runfile("tests/cluster/cluster_probe")}, {PyTorchJobPod(0), PyTorchJobPod(1)});
  for (int index : {0, 1}) {
    const CommandResult& r = pods[index];
    EXPECT_EQ(r.exit_code, 3) << r.Explain();
    EXPECT_TRUE(absl::StrContains(r.err, "TINYDDP_STORE_SECRET is not set")) << r.Explain();
    EXPECT_TRUE(absl::StrContains(r.err, "Kubernetes")) << "how to hand it to every pod:\n" << r.Explain();
  }
}

TEST_F(Pods, JobSetsLauncherTakesItsNodeRankFromJobCompletionIndex) {
  // examples/cluster/jobset.yaml's command, with this machine's stand-ins: the probe for ddp_mlp and
  // one process per pod for --nproc_per_node=gpu.
  const std::string command = absl::StrCat(
      "exec ", Runfile("dist/launch/launch"), " --nnodes=$NNODES --node_rank=$JOB_COMPLETION_INDEX",
      " --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT --nproc_per_node=1 --timeout=60s ",
      Runfile("tests/cluster/cluster_probe"));
  std::vector<Env> pods;
  for (int index : {0, 1}) {
    Env env = PodVariables(index);
    env.insert(env.end(), {{"JOB_COMPLETION_INDEX", std::to_string(index)},
                           {"NNODES", "2"},
                           {"MASTER_ADDR", master_},
                           {"MASTER_PORT", std::to_string(port_)},
                           {"TINYDDP_STORE_SECRET", "a-kubernetes-secret-for-this-test"}});
    pods.push_back(env);
  }
  ExpectOneRankPerPod(RunPods({"/bin/sh", "-c", command}, pods), "env://");
}

}  // namespace
}  // namespace tinyddp::testing
