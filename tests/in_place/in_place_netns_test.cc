// A cut link under --min_replicas: two emulated hosts (network namespaces joined by a veth pair,
// tests/faults/netns.h), one `launch` and two Gloo ranks on each, the store on host 0. The link is taken down
// mid-run (no reset reaches either side). Host 0's ranks time out in their all_reduce (--timeout), agree
// without host 1's (which cannot reach the store and leave) and train on to the end; the store's side is the
// side that goes on. What the launchers then say is today's multi-node agreement: host 0's launcher waits
// --timeout for host 1's to report its workers' end, which cannot come, and exits 1 naming that (its workers
// finished); host 1's workers fail. Both namespaces share this machine's host name, so the survivors' fencing
// (same host: SIGKILL) reaches host 1's ranks too, as it would not across real machines. Needs root and
// iproute2; skips with the reason otherwise.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_job.h"
#include "tests/faults/netns.h"

namespace tinyddp::testing {
namespace {

using std::chrono::seconds;

TEST(InPlaceNetns, ACutLinkLeavesTheStoresSideTrainingToTheEndWithItsTwoReplicas) {
  std::string why_not;
  std::unique_ptr<TwoHosts> hosts = TwoHosts::Create(&why_not);
  if (hosts == nullptr) GTEST_SKIP() << "cannot emulate two hosts here: " << why_not;
  const std::vector<std::pair<std::string, std::string>> env = {{"TINYDDP_STORE_SECRET", "in-place-netns-secret"}};
  std::vector<Job> launchers;
  for (int node = 0; node < 2; ++node) {
    const std::vector<std::string> launch = {"--nnodes=2", absl::StrCat("--node_rank=", node),
                                             "--master_addr=" + hosts->address(0), "--master_port=29511",
                                             "--nproc_per_node=2", "--grace_seconds=1"};
    const std::vector<std::string> program = {"--dataset=synthetic", "--synthetic_examples=200000",
                                              "--synthetic_input_size=32", "--hidden=24", "--batch_size=32",
                                              "--backend=gloo", "--max_steps=400", "--log_every=1",
                                              "--timeout=3s", "--min_replicas=2"};
    launchers.push_back(StartJob(hosts->Exec(node, LaunchArgv(launch, program)), env));
  }
  ASSERT_TRUE(WaitForOutput(launchers[0], "step 20 (epoch 1, 4 replicas)", seconds(120)))
      << launchers[0].Output() << launchers[1].Output();
  ASSERT_TRUE(hosts->CutLink()) << "ip link set down failed";
  const Ended host0 = WaitJob(launchers[0], seconds(120));
  const Ended host1 = WaitJob(launchers[1], seconds(120));
  const std::string out0 = launchers[0].Output(), out1 = launchers[1].Output();
  EXPECT_NE(out0.find("in-place recovery: generation 1: replicas 0,1 from step"), std::string::npos) << out0;
  EXPECT_NE(out0.find("done: 400 steps with 2 replicas at the end"), std::string::npos) << out0 << out1;
  EXPECT_TRUE(host0.finished) << host0.How();
  EXPECT_NE(out0.find("not every node's launcher reported the end of its workers"), std::string::npos) << out0;
  EXPECT_TRUE(host1.finished && !(host1.value == 0 && !host1.signaled)) << "host 1's side cannot go on: " << host1.How()
                                                                         << out1;
  std::printf("cut link: host 0's launcher %s, host 1's %s; host 0's last lines:\n%s\n", host0.How().c_str(),
              host1.How().c_str(), out0.substr(out0.size() > 1500 ? out0.size() - 1500 : 0).c_str());
}

}  // namespace
}  // namespace tinyddp::testing
