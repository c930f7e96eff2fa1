// Faults as an adversarial user makes them, on a real job: `launch` starting two ranks of ddp_mlp that
// train over Gloo, then a rank frozen (SIGSTOP), killed between steps, killed inside a collective, hung
// under TINYDDP_DISTRIBUTED_DEBUG=DETAIL, or the link between two emulated hosts cut (the job's timeout given
// to the program only; or a launcher whose own timeout is 5 minutes, which must still give up within
// seconds of its worker's failure instead of waiting on the store it cannot reach). What must follow,
// every time: the job ends (the test's bound is only a safety net: every wait inside is bounded by
// --timeout), with a failure status, never SIGABRT, and the flight recorder's verdict names the collective
// and the rank at fault (or says that none was missing, for a cut link). No timed assertions: the times
// are printed, for the record.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_job.h"
#include "tests/faults/netns.h"

namespace tinyddp::testing {
namespace {

using std::chrono::seconds;
namespace t = ::tinyddp::dist::testing;

// Short, so the tests are quick; everything inside the job is bounded by it.
const std::vector<std::string> kLaunchTwoRanks = {"--nproc_per_node=2", "--timeout=3s", "--grace_seconds=1"};
constexpr seconds kBound(180);  // the safety net: far beyond what a working job needs

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

// The launcher's one-line verdict ("launch: flight recorder (pg0): ..."), or "".
std::string Verdict(const std::string& output, const std::string& prefix = "launch: ") {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StartsWith(line, prefix + "flight recorder (")) return std::string(line);
  }
  return "";
}

void ExpectFailedWithoutAbort(const Ended& e, const std::string& output) {
  ASSERT_TRUE(e.finished) << output;
  EXPECT_FALSE(e.signaled) << e.How() << "\n" << output;
  EXPECT_NE(e.value, 0) << output;
  EXPECT_FALSE(Contains(output, "SIGABRT")) << output;
  EXPECT_FALSE(Contains(output, "Aborted")) << output;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Faults, FrozenRankEndsTheJobAndTheVerdictNamesIt) {
  Job job = StartJob(LaunchArgv(kLaunchTwoRanks, TinyTrainingJob("gloo")), {});
  ASSERT_TRUE(WaitForOutput(job, "epoch 2/", kBound)) << job.Output();
  const pid_t rank1 = WorkerPid(job.pid, 1);
  ASSERT_GT(rank1, 0) << job.Output();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);
  const Ended e = WaitJob(job, kBound);
  std::printf("frozen rank: the job was gone %.1f s after SIGSTOP (--timeout=3s, --grace_seconds=1)\n",
              SecondsSince(t0));
  const std::string out = job.Output();
  ExpectFailedWithoutAbort(e, out);
  EXPECT_TRUE(t::ProcessGone(rank1)) << "the frozen rank outlived its launcher";
  // Rank 1 froze between collectives (never started the next) or inside one (started, no end, stopped).
  const std::string verdict = Verdict(out);
  EXPECT_TRUE(Contains(verdict, "collective #")) << out;
  EXPECT_TRUE(Contains(verdict, "ranks {1} never started it") ||
              Contains(verdict, "ranks {1} started it and recorded no end"))
      << out;
}

TEST(Faults, DeadRankEndsTheJobAndTheVerdictNamesIt) {
  Job job = StartJob(LaunchArgv(kLaunchTwoRanks, TinyTrainingJob("gloo")), {{"TINYDDP_FAULT", "rank=1,step=30,action=kill"}});
  const Ended e = WaitJob(job, kBound);
  const std::string out = job.Output();
  ASSERT_TRUE(e.finished) << out;
  EXPECT_EQ(e.value, 128 + SIGKILL) << "the launcher reports the rank that died first\n" << out;
  EXPECT_FALSE(Contains(out, "SIGABRT")) << out;
  EXPECT_TRUE(Contains(out, "rank 1 (local rank 1")) << out;
  const std::string verdict = Verdict(out);
  EXPECT_TRUE(Contains(verdict, "(bucket 0, 4.1 KiB): ranks {1} never started it; rank 1's last completed collective is #"))
      << out;
}

TEST(Faults, RankKilledInsideABucketAllReduceIsNamed) {
  // Collective #40 is a bucket all_reduce of a step in the first epoch: rank 1 dies right after issuing it.
  Job job = StartJob(LaunchArgv(kLaunchTwoRanks, TinyTrainingJob("gloo")),
                     {{"TINYDDP_FAULT", "rank=1,point=collective,step=40,action=kill"}});
  const Ended e = WaitJob(job, kBound);
  const std::string out = job.Output();
  ASSERT_TRUE(e.finished) << out;
  EXPECT_NE(e.value, 0) << out;
  EXPECT_FALSE(Contains(out, "SIGABRT")) << out;
  const std::string verdict = Verdict(out);
  EXPECT_TRUE(Contains(verdict, "collective #40 AllReduce(float32 [1042], AVG) (bucket 0, 4.1 KiB): ")) << out;
  EXPECT_TRUE(Contains(verdict, "ranks {1} never started it") ||
              Contains(verdict, "ranks {1} started it and recorded no end"))
      << out;
}

TEST(Faults, HungRankUnderDebugDetailIsNamedByTheFingerprintCheck) {
  Job job = StartJob(LaunchArgv(kLaunchTwoRanks, TinyTrainingJob("gloo")),
                     {{"TINYDDP_FAULT", "rank=1,step=30,action=hang"}, {"TINYDDP_DISTRIBUTED_DEBUG", "DETAIL"}});
  const Ended e = WaitJob(job, kBound);
  const std::string out = job.Output();
  ExpectFailedWithoutAbort(e, out);
  EXPECT_TRUE(Contains(out, "but rank(s) 1 did not reach collective #")) << out;
  EXPECT_TRUE(Contains(Verdict(out), "ranks {1} never started it")) << out;
}

// Two emulated hosts: network namespaces joined by a veth pair, one launcher and one rank in each, Gloo
// and the store over the veth. The link is cut mid-epoch. `launch_timeout` ("" for none) and
// `program_timeout` are where the user gave the job's timeout. Returns each launcher's output.
std::vector<std::string> CutLinkMidEpoch(TwoHosts& hosts, const std::string& launch_timeout,
                                         const std::string& program_timeout, seconds bound) {
  // One directory for both ranks' flight records (the hosts share this machine's file system), so each
  // launcher's verdict sees both rings.
  const std::string records = t::MakeTempDir();
  const std::vector<std::pair<std::string, std::string>> env = {{"TINYDDP_FLIGHT_RECORDER_DIR", records},
                                                                {"TINYDDP_STORE_SECRET", "fault-test-secret"}};
  std::vector<Job> launchers;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> launch = {"--nnodes=2", absl::StrCat("--node_rank=", node),
                                       "--master_addr=" + hosts.address(0), "--master_port=29500",
                                       "--nproc_per_node=1", "--grace_seconds=1"};
    if (!launch_timeout.empty()) launch.push_back("--timeout=" + launch_timeout);
    std::vector<std::string> program = TinyTrainingJob("gloo");
    if (!program_timeout.empty()) program.push_back("--timeout=" + program_timeout);
    launchers.push_back(StartJob(hosts.Exec(node, LaunchArgv(launch, program)), env));
  }
  std::vector<std::string> outputs;
  if (!WaitForOutput(launchers[0], "epoch 2/", kBound)) {
    ADD_FAILURE() << launchers[0].Output() << launchers[1].Output();
    return {};
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!hosts.CutLink()) ADD_FAILURE() << "ip link set down failed";
  for (int node = 0; node < 2; ++node) {
    const Ended e = WaitJob(launchers[node], bound);
    std::printf("cut link: node %d's launcher gone %.1f s after the cut (launch --timeout=%s, the program's %s): %s\n",
                node, SecondsSince(t0), launch_timeout.c_str(), program_timeout.c_str(), e.How().c_str());
    outputs.push_back(launchers[node].Output());
    ExpectFailedWithoutAbort(e, outputs.back());
  }
  return outputs;
}

TEST(Faults, CutLinkBetweenTwoHostsEndsBothAndTheVerdictSaysNoRankWasMissing) {
  std::string why_not;
  std::unique_ptr<TwoHosts> hosts = TwoHosts::Create(&why_not);
  if (hosts == nullptr) GTEST_SKIP() << "cannot emulate two hosts here: " << why_not;
  // The timeout given to the program only, as many users do: the launchers wait as long as it does.
  for (const std::string& out : CutLinkMidEpoch(*hosts, "", "3s", kBound)) {
    EXPECT_TRUE(Contains(Verdict(out), "every rank started it, so none was missing")) << out;
  }
}

TEST(Faults, CutLinkAfterItsWorkerFailedALauncherGivesUpWithinSecondsWhateverItsTimeout) {
  std::string why_not;
  std::unique_ptr<TwoHosts> hosts = TwoHosts::Create(&why_not);
  if (hosts == nullptr) GTEST_SKIP() << "cannot emulate two hosts here: " << why_not;
  // The launchers' own timeout is 5 minutes: once its worker has failed, a launcher that cannot reach node
  // 0's store must not wait that long. The bound (well under 5 minutes) is the check; the time is printed.
  const std::vector<std::string> outputs = CutLinkMidEpoch(*hosts, "5m", "3s", seconds(90));
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(Contains(outputs[1], "launch: job failed: rank 1 (local rank 0")) << "the local failure is the reason\n"
                                                                              << outputs[1];
  EXPECT_TRUE(Contains(outputs[1], "--timeout=3s differs from TINYDDP_TIMEOUT=5m")) << outputs[1];
}

}  // namespace
}  // namespace tinyddp::testing
