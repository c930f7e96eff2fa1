// The analyzer's verdicts on the records each kind of failure leaves behind: a frozen or dead rank, a
// rank killed inside a collective, a cut link, a rank that skipped a call, a rank with no record; and
// the directory reader that combines a rank's ring with its dump.
#include "dist/observe/flight_recorder/verdict.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dist/observe/flight_recorder/recorder.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

// As a ProcessGroup tells its observers: numbered, with the issuing thread's bucket.
void Issue(FlightRecorder& recorder, int64_t seq, CollectiveInfo info) {
  info.seq = seq;
  info.bucket = CollectiveBucketScope::Current();
  recorder.Issued(info);
}

constexpr int64_t kNow = 2'000'000'000'000'000;  // the analysis' "now", microseconds

::testing::AssertionResult Has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" is not in \"" << text << "\"";
}

// A rank's record: collectives 0..last_completed completed; DDP's buckets alternate 1, 0 per step (two
// buckets of 1.0 MiB and 3 MiB), as the reducer issues them.
RankFlightRecord Rank(int rank, int world, int64_t last_completed, const char* source = "dump") {
  RankFlightRecord r;
  r.group = "pg0";
  r.backend = "gloo";
  r.rank = rank;
  r.world_size = world;
  r.pid = 1000 + rank;
  r.source = source;
  r.path = "pg0.rank" + std::to_string(rank) + "." + source;
  r.written_us = r.heartbeat_us = kNow - 100'000 + rank;  // alive, by its heartbeat (no boot id: not this machine)
  for (int64_t seq = 0; seq <= last_completed; ++seq) {
    FlightEntry e;
    e.seq = seq;
    e.state = FlightState::kCompleted;
    e.op = "AllReduce";
    e.bucket = seq % 2 == 0 ? 1 : 0;
    e.numel = e.bucket == 0 ? 262144 : 786432;
    e.bytes = 4 * e.numel;
    e.signature = absl::StrCat("float32 [", e.numel, "], AVG");
    e.dtype = "float32";
    r.entries.push_back(e);
  }
  return r;
}

// Appends collective #seq (the next bucket) in `state`.
void Add(RankFlightRecord& r, FlightState state, const std::string& error = "") {
  FlightEntry e = Rank(0, 1, r.entries.back().seq + 1).entries.back();
  e.state = state;
  e.error = error;
  r.entries.push_back(e);
}

TEST(FlightRecorderAnalysis, NamesTheFrozenRankThatNeverStartedTheCollective) {
  // Rank 1 froze between steps: its last collective, #1090, completed; rank 0 timed out in #1091.
  RankFlightRecord r0 = Rank(0, 2, 1090);
  Add(r0, FlightState::kFailed, "DEADLINE_EXCEEDED: AllReduce(float32 [262144], AVG) #1091 timed out after 20000 ms");
  r0.reason = "timeout";
  const RankFlightRecord r1 = Rank(1, 2, 1090, "ring");
  const FlightVerdict v = JudgeFlightRecords({r1, r0}, {}, kNow);
  EXPECT_EQ(v.verdict,
            "collective #1091 AllReduce(float32 [262144], AVG) (bucket 0, 1.0 MiB): ranks {1} never started it; rank "
            "1's last completed collective is #1090; ranks {0} failed in it (DEADLINE_EXCEEDED)");
  EXPECT_EQ(v.culprits, std::vector<int>({1}));
  ASSERT_EQ(v.details.size(), 2u);
  EXPECT_TRUE(Has(v.details[1], "rank 1 (ring"));
  EXPECT_TRUE(Has(v.details[1], "never issued #1091"));
}

TEST(FlightRecorderAnalysis, NamesARankKilledInsideTheCollective) {
  // Rank 2 issued and started #37 and then vanished (SIGKILL): its ring has no end and it wrote no dump.
  RankFlightRecord r0 = Rank(0, 3, 36), r1 = Rank(1, 3, 36), r2 = Rank(2, 3, 36, "ring");
  Add(r0, FlightState::kFailed, "UNAVAILABLE: connection reset by peer");
  Add(r1, FlightState::kStarted);
  r1.reason = "SIGUSR1";  // alive and waiting when it dumped
  Add(r2, FlightState::kStarted);
  r2.heartbeat_us = kNow - 30'000'000;  // silent for 30 s: its process is gone
  const FlightVerdict v = JudgeFlightRecords({r0, r1, r2}, {}, kNow);
  EXPECT_TRUE(Has(v.verdict, "collective #37 AllReduce(float32 [262144], AVG) (bucket 0, 1.0 MiB): "));
  EXPECT_TRUE(Has(v.verdict, "ranks {2} started it and recorded no end (they died or froze inside it)"));
  EXPECT_TRUE(Has(v.verdict, "ranks {1} started it and are waiting in it"));
  EXPECT_TRUE(Has(v.verdict, "ranks {0} failed in it (UNAVAILABLE)"));
  EXPECT_EQ(v.culprits, std::vector<int>({2}));
}

TEST(FlightRecorderAnalysis, EveryRankInTheCollectiveMeansTheyCouldNotReachEachOther) {
  // A cut link: both ranks alive, both started #12, both timed out.
  RankFlightRecord r0 = Rank(0, 2, 11), r1 = Rank(1, 2, 11);
  Add(r0, FlightState::kFailed, "DEADLINE_EXCEEDED: timed out waiting for send");
  Add(r1, FlightState::kFailed, "DEADLINE_EXCEEDED: timed out waiting for recv");
  const FlightVerdict v = JudgeFlightRecords({r0, r1}, {}, kNow);
  EXPECT_TRUE(Has(v.verdict, "collective #12 "));
  EXPECT_TRUE(Has(v.verdict, "ranks {0,1} failed in it (DEADLINE_EXCEEDED)"));
  EXPECT_TRUE(Has(v.verdict, "every rank started it, so none was missing"));
  EXPECT_TRUE(v.culprits.empty());
}

TEST(FlightRecorderAnalysis, ARankStillWaitingInTheCollectiveIsNotBlamed) {
  // A cut link seen from node 0 while rank 1 (on node 1, sharing the directory) still waits: its ring has
  // #12 started and its heartbeat is fresh.
  RankFlightRecord r0 = Rank(0, 2, 11), r1 = Rank(1, 2, 11, "ring");
  Add(r0, FlightState::kFailed, "DEADLINE_EXCEEDED: timed out waiting for send");
  Add(r1, FlightState::kStarted);
  const FlightVerdict v = JudgeFlightRecords({r0, r1}, {}, kNow);
  EXPECT_TRUE(Has(v.verdict, "ranks {1} started it and are waiting in it"));
  EXPECT_TRUE(Has(v.verdict, "every rank started it, so none was missing"));
  EXPECT_TRUE(v.culprits.empty());
}

TEST(FlightRecorderAnalysis, LivenessOnThisMachineComesFromTheKernel) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  RankFlightRecord r = Rank(1, 2, 3, "ring");
  r.boot_id = ThisBootId();
  r.pid = child;
  r.heartbeat_us = 1;  // ignored on this machine: /proc decides
  EXPECT_EQ(LivenessOf(r, kNow), Liveness::kStopped);
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(LivenessOf(r, kNow), Liveness::kGone);
  r.pid = ::getpid();
  EXPECT_EQ(LivenessOf(r, kNow), Liveness::kAlive);
  // Another machine: the heartbeat.
  r.boot_id = "another-machine";
  r.heartbeat_us = kNow - 1'000'000;
  EXPECT_EQ(LivenessOf(r, kNow), Liveness::kAlive);
  r.heartbeat_us = kNow - 60'000'000;
  EXPECT_EQ(LivenessOf(r, kNow), Liveness::kGone);
}

TEST(FlightRecorderAnalysis, ReportsTheFirstSequenceNumberWhereRanksDisagree) {
  RankFlightRecord r0 = Rank(0, 3, 11), r1 = Rank(1, 3, 11), r2 = Rank(2, 3, 11);
  for (RankFlightRecord* r : {&r0, &r1, &r2}) Add(*r, FlightState::kStarted);
  // Rank 1 skipped a call: its #12 is a Broadcast where the others all_reduce.
  r1.entries.back().op = "Broadcast";
  r1.entries.back().signature = "float32 [10], root=0";
  const FlightVerdict v = JudgeFlightRecords({r0, r1, r2}, {}, kNow);
  EXPECT_EQ(v.verdict,
            "ranks disagree at #12: ranks {0,2} AllReduce(float32 [786432], AVG) vs rank 1 Broadcast(float32 [10], "
            "root=0) (every rank must issue the same collectives in the same order)");
  EXPECT_EQ(v.culprits, std::vector<int>({1}));  // the odd one out

  // Two ranks, one each way: nobody can tell who is wrong.
  const FlightVerdict even = JudgeFlightRecords({r0, r1}, {}, kNow);
  EXPECT_TRUE(Has(even.verdict, "ranks disagree at #12: rank 0 AllReduce("));
  EXPECT_TRUE(even.culprits.empty());
}

TEST(FlightRecorderAnalysis, PointToPointCallsAreNotComparedAcrossRanks) {
  RankFlightRecord r0 = Rank(0, 2, 11), r1 = Rank(1, 2, 11);
  for (RankFlightRecord* r : {&r0, &r1}) Add(*r, FlightState::kStarted);
  // Rank 0's first point-to-point call is a Send, rank 1's a Recv, still in flight: a pipeline, not a
  // disagreement. The verdict is about collective #12, where both wait.
  for (RankFlightRecord* r : {&r0, &r1}) {
    FlightEntry e;
    e.seq = kPointToPointSeqBase;
    e.state = FlightState::kStarted;
    e.op = r == &r0 ? "Send" : "Recv";
    e.signature = r == &r0 ? "float32 [5] to 1 tag 0" : "float32 [5] from 0 tag 0";
    r->entries.push_back(e);
  }
  const FlightVerdict v = JudgeFlightRecords({r0, r1}, {}, kNow);
  EXPECT_FALSE(Has(v.verdict, "disagree")) << v.verdict;
  EXPECT_TRUE(Has(v.verdict, "#12")) << v.verdict;
}

TEST(FlightRecorderAnalysis, ARankWithoutAnyRecordIsNamedUnlessItRanElsewhere) {
  RankFlightRecord r0 = Rank(0, 3, 4), r1 = Rank(1, 3, 4);
  Add(r0, FlightState::kFailed, "DEADLINE_EXCEEDED: x");
  Add(r1, FlightState::kFailed, "DEADLINE_EXCEEDED: x");
  const FlightVerdict v = JudgeFlightRecords({r0, r1}, {}, kNow);
  EXPECT_TRUE(Has(v.verdict, "ranks {2} never started it; rank 2 left no record"));
  EXPECT_EQ(v.culprits, std::vector<int>({2}));

  // Rank 2 ran on another machine, whose files are there: not blamed from here.
  const FlightVerdict here = JudgeFlightRecords({r0, r1}, /*ranks_here=*/{0, 1}, kNow);
  EXPECT_FALSE(Has(here.verdict, "never started"));
  EXPECT_TRUE(Has(here.verdict, "ranks {2} ran on other machines"));
  EXPECT_TRUE(here.culprits.empty());
}

TEST(FlightRecorderAnalysis, NothingPendingIsSaidSo) {
  const FlightVerdict v = JudgeFlightRecords({Rank(0, 2, 9), Rank(1, 2, 9)}, {}, kNow);
  EXPECT_EQ(v.verdict, "no collective of pg0 was pending: every rank with a record completed all 10 it issued");
  EXPECT_TRUE(v.culprits.empty());
}

TEST(FlightRecorderAnalysis, RecordsOfAnotherWorldSizeAreSkipped) {
  RankFlightRecord stale = Rank(3, 4, 100);
  stale.written_us = 1;  // an older job's file left in the same directory
  RankFlightRecord r0 = Rank(0, 2, 5), r1 = Rank(1, 2, 4);
  Add(r0, FlightState::kFailed, "DEADLINE_EXCEEDED: x");
  const FlightVerdict v = JudgeFlightRecords({stale, r0, r1}, {}, kNow);
  EXPECT_TRUE(Has(v.verdict, "collective #5 "));
  EXPECT_EQ(v.culprits, std::vector<int>({1}));
  ASSERT_EQ(v.notes.size(), 1u);
  EXPECT_TRUE(Has(v.notes[0], "rank 3 of 4 ranks, not of this job's 2"));
}

TEST(FlightRecorderAnalysis, ReadsRingsAndDumpsFromADirectory) {
  const std::string dir = testing::MakeTempDir();
  // Two real recorders write their rings; rank 0 also dumps on its failure. Rank 1 stops before #3.
  FlightRecorder rank0("pg0", "gloo", 0, 2, std::chrono::seconds(2), dir);
  FlightRecorder rank1("pg0", "gloo", 1, 2, std::chrono::seconds(2), dir);
  for (int64_t seq = 0; seq < 4; ++seq) {
    CollectiveBucketScope bucket(static_cast<int>(seq % 2));
    const CollectiveInfo info{.op = "AllReduce", .signature = "float32 [99], AVG", .dtype = "float32", .numel = 99,
                              .bytes = 396};
    Issue(rank0, seq, info);
    rank0.Started(seq);
    if (seq == 3) break;
    Issue(rank1, seq, info);
    rank0.Ended(seq, absl::OkStatus());
    rank1.Ended(seq, absl::OkStatus());
  }
  const absl::Status timeout = absl::DeadlineExceededError("AllReduce #3 timed out after 2000 ms");
  rank0.Ended(3, timeout);
  ASSERT_FALSE(rank0.Dump("timeout", timeout).empty());
  testing::WriteFile(dir + "/notes.txt", "not a record");

  absl::StatusOr<std::vector<FlightVerdict>> verdicts = AnalyzeFlightRecorderDir(dir);
  ASSERT_TRUE(verdicts.ok()) << verdicts.status();
  ASSERT_EQ(verdicts->size(), 1u);
  const FlightVerdict& v = (*verdicts)[0];
  EXPECT_EQ(v.verdict,
            "collective #3 AllReduce(float32 [99], AVG) (bucket 1, 396 B): ranks {1} never started it; rank 1's last "
            "completed collective is #2; ranks {0} failed in it (DEADLINE_EXCEEDED)");
  ASSERT_EQ(v.details.size(), 2u);
  EXPECT_TRUE(Has(v.details[0], "rank 0 (ring+dump"));
  EXPECT_TRUE(Has(v.details[0], "[dumped on timeout]"));
  EXPECT_TRUE(Has(v.details[1], "rank 1 (ring"));
  const std::string text = FormatFlightVerdicts(*verdicts, "launch: ");
  EXPECT_TRUE(Has(text, "launch: flight recorder (pg0): collective #3 "));
  EXPECT_TRUE(Has(text, "\nlaunch:   rank 1 (ring"));

  EXPECT_EQ(AnalyzeFlightRecorderDir(testing::MakeTempDir()).status().code(), absl::StatusCode::kNotFound);
}

TEST(FlightRecorderAnalysis, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(4096), "4.0 KiB");
  EXPECT_EQ(HumanBytes(1 << 20), "1.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{5} << 29), "2.5 GiB");
}

}  // namespace
}  // namespace tinyddp::dist
