// The flight recorder on its own: what the ring file holds while its writer lives, after its writer was
// killed, after it wrapped around; dumps the analyzer reads back; SIGUSR1.
#include "dist/observe/flight_recorder/recorder.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "dist/observe/flight_recorder/record.h"
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

using std::chrono::seconds;

CollectiveInfo AllReduceOf(int64_t numel) {
  return {.op = "AllReduce", .signature = "float32 [1000], AVG", .dtype = "float32", .numel = numel, .bytes = 4 * numel};
}

TEST(FlightRecorder, RingFileShowsEveryStateAndTheBucketWhileTheWriterLives) {
  const std::string dir = testing::MakeTempDir();
  FlightRecorder recorder("pg7", "gloo", 1, 3, seconds(20), dir);
  ASSERT_EQ(recorder.ring_path(), dir + "/pg7.rank1.ring");
  Issue(recorder, 0, {.op = "Broadcast", .signature = "int64 [5], root=0", .dtype = "int64", .numel = 5, .bytes = 40});
  recorder.Started(0);
  recorder.Ended(0, absl::OkStatus());
  {
    CollectiveBucketScope bucket(2);
    Issue(recorder, 1, AllReduceOf(262147));
  }
  recorder.Started(1);
  recorder.Ended(1, absl::DeadlineExceededError("AllReduce #1 timed out after 20000 ms"));
  Issue(recorder, 2, AllReduceOf(13));
  recorder.Started(2);
  Issue(recorder, 3, {.op = "AllReduce", .signature = "float32 [13], SUM", .dtype = "float32", .via = "copy engines",
                        .numel = 13, .bytes = 52});

  absl::StatusOr<RankFlightRecord> ring = ReadFlightRing(recorder.ring_path());
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->group, "pg7");
  EXPECT_EQ(ring->backend, "gloo");
  EXPECT_EQ(ring->rank, 1);
  EXPECT_EQ(ring->world_size, 3);
  EXPECT_EQ(ring->pid, ::getpid());
  EXPECT_EQ(ring->timeout_ms, 20000);
  ASSERT_EQ(ring->entries.size(), 4u);
  const FlightEntry& broadcast = ring->entries[0];
  EXPECT_EQ(broadcast.state, FlightState::kCompleted);
  EXPECT_EQ(broadcast.Fingerprint(), "Broadcast(int64 [5], root=0)");
  EXPECT_EQ(broadcast.bucket, -1);
  EXPECT_GT(broadcast.completed_us, 0);
  const FlightEntry& failed = ring->entries[1];
  EXPECT_EQ(failed.state, FlightState::kFailed);
  EXPECT_EQ(failed.bucket, 2);
  EXPECT_EQ(failed.bytes, 4 * 262147);
  EXPECT_NE(failed.error.find("DEADLINE_EXCEEDED"), std::string::npos) << failed.error;
  EXPECT_EQ(ring->entries[2].state, FlightState::kStarted);
  EXPECT_EQ(ring->entries[2].bucket, -1);  // the scope ended
  EXPECT_EQ(ring->entries[3].state, FlightState::kEnqueued);
  EXPECT_EQ(ring->entries[3].Fingerprint(), "AllReduce(float32 [13], SUM) via copy engines");
}

TEST(FlightRecorder, RingSurvivesAWriterKilledInsideACollective) {
  const std::string dir = testing::MakeTempDir();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FlightRecorder recorder("pg0", "nccl", 1, 2, seconds(5), dir);
    for (int64_t seq = 0; seq < 5; ++seq) {
      Issue(recorder, seq, AllReduceOf(100 + seq));
      recorder.Started(seq);
      if (seq < 4) recorder.Ended(seq, absl::OkStatus());
    }
    ::raise(SIGKILL);  // no destructor, no dump: only the mapped file is left
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  absl::StatusOr<RankFlightRecord> ring = ReadFlightRing(RingFilePath(dir, "pg0", 1));
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->pid, child);
  ASSERT_EQ(ring->entries.size(), 5u);
  EXPECT_EQ(ring->entries[3].state, FlightState::kCompleted);
  EXPECT_EQ(ring->entries[4].seq, 4);
  EXPECT_EQ(ring->entries[4].state, FlightState::kStarted);
  EXPECT_EQ(ring->entries[4].numel, 104);
}

TEST(FlightRecorder, KeepsTheLastCapacityCollectives) {
  const std::string dir = testing::MakeTempDir();
  FlightRecorder recorder("pg1", "gloo", 0, 2, seconds(5), dir, /*capacity=*/8);
  for (int64_t seq = 0; seq < 21; ++seq) {
    Issue(recorder, seq, AllReduceOf(seq + 1));
    recorder.Ended(seq, absl::OkStatus());
  }
  recorder.Ended(3, absl::InternalError("late news of a collective long gone"));  // overwritten: ignored
  absl::StatusOr<RankFlightRecord> ring = ReadFlightRing(recorder.ring_path());
  ASSERT_TRUE(ring.ok()) << ring.status();
  ASSERT_EQ(ring->entries.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(ring->entries[i].seq, static_cast<int64_t>(13 + i));
    EXPECT_EQ(ring->entries[i].numel, static_cast<int64_t>(14 + i));
    EXPECT_EQ(ring->entries[i].state, FlightState::kCompleted);
  }
}

TEST(FlightRecorder, PointToPointCallsTakeTheirOwnSlotsBesideTheCollectives) {
  const std::string dir = testing::MakeTempDir();
  FlightRecorder recorder("pg2", "gloo", 0, 4, seconds(5), dir, /*capacity=*/8);
  // Collective #3 and point-to-point #p3 share nothing but the last digit: neither overwrites the other.
  for (int64_t n = 0; n < 4; ++n) {
    Issue(recorder, n, AllReduceOf(n + 1));
    Issue(recorder, kPointToPointSeqBase + n, {.op = "Send", .signature = "float32 [9] to 2 tag 0", .numel = 9});
  }
  recorder.Ended(kPointToPointSeqBase + 3, absl::DeadlineExceededError("Send(float32 [9]) to 2 tag 0 #p3 timed out"));
  recorder.Ended(3, absl::OkStatus());
  absl::StatusOr<RankFlightRecord> ring = ReadFlightRing(recorder.ring_path());
  ASSERT_TRUE(ring.ok()) << ring.status();
  ASSERT_EQ(ring->entries.size(), 8u);
  EXPECT_EQ(ring->entries[3].seq, 3);
  EXPECT_EQ(ring->entries[3].state, FlightState::kCompleted);
  EXPECT_EQ(ring->entries[7].seq, kPointToPointSeqBase + 3);
  EXPECT_EQ(ring->entries[7].Fingerprint(), "Send(float32 [9] to 2 tag 0)");
  EXPECT_EQ(ring->entries[7].state, FlightState::kFailed);
}

TEST(FlightRecorder, DumpIsJsonThatReadsBackAsTheSnapshot) {
  const std::string dir = testing::MakeTempDir();
  FlightRecorder recorder("pg0", "gloo", 0, 2, seconds(3), dir);
  Issue(recorder, 0, AllReduceOf(7));
  recorder.Ended(0, absl::OkStatus());
  {
    CollectiveBucketScope bucket(0);
    Issue(recorder, 1, AllReduceOf(1 << 18));
  }
  recorder.Started(1);
  const absl::Status error = absl::DeadlineExceededError("AllReduce(float32 [262144], AVG) #1 timed out\nsecond line");
  recorder.Ended(1, error);

  const std::string path = recorder.Dump("timeout", error);
  ASSERT_EQ(path, dir + "/pg0.rank0.json");
  absl::StatusOr<RankFlightRecord> dump = ReadFlightDump(path);
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(dump->source, "dump");
  EXPECT_EQ(dump->reason, "timeout");
  EXPECT_EQ(dump->error, error.ToString());
  const RankFlightRecord snapshot = recorder.Snapshot();
  ASSERT_EQ(dump->entries.size(), snapshot.entries.size());
  for (size_t i = 0; i < snapshot.entries.size(); ++i) {
    EXPECT_EQ(dump->entries[i].seq, snapshot.entries[i].seq);
    EXPECT_EQ(dump->entries[i].state, snapshot.entries[i].state);
    EXPECT_EQ(dump->entries[i].Fingerprint(), snapshot.entries[i].Fingerprint());
    EXPECT_EQ(dump->entries[i].bucket, snapshot.entries[i].bucket);
    EXPECT_EQ(dump->entries[i].bytes, snapshot.entries[i].bytes);
    EXPECT_EQ(dump->entries[i].error, snapshot.entries[i].error);
  }
  EXPECT_EQ(dump->entries[1].bucket, 0);
  EXPECT_NE(recorder.WhereToLook().find(path), std::string::npos);
}

TEST(FlightRecorder, ADamagedDumpIsAnErrorNamingTheFile) {
  const std::string dir = testing::MakeTempDir();
  testing::WriteFile(dir + "/pg0.rank0.json", "{\"format\": \"tinyddp flight recorder\", \"group\": ");
  absl::StatusOr<RankFlightRecord> dump = ReadFlightDump(dir + "/pg0.rank0.json");
  EXPECT_EQ(dump.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dump.status().message().find("pg0.rank0.json"), std::string::npos);
  testing::WriteFile(dir + "/x.ring", std::string(300, 'x'));
  EXPECT_EQ(ReadFlightRing(dir + "/x.ring").status().code(), absl::StatusCode::kDataLoss);
}

// A fresh process (this binary again): the dumper thread is started by the first recorder of a process,
// and a fork of this test process would inherit the started flag without the thread.
TEST(FlightRecorder, Sigusr1WritesADumpAndTheProcessRunsOn) {
  if (const char* dir = std::getenv("FLIGHT_RECORDER_TEST_CHILD_DIR")) {
    FlightRecorder recorder("pg3", "gloo", 2, 4, seconds(5), dir);
    Issue(recorder, 0, AllReduceOf(11));
    recorder.Started(0);
    ::raise(SIGUSR1);
    // The dumper thread writes it; this process must still be alive to see it.
    const bool written = testing::WaitForFile(DumpFilePath(dir, "pg3", 2), seconds(30));
    std::fflush(nullptr);
    ::_exit(written ? 0 : 1);
  }
  const std::string dir = testing::MakeTempDir();
  const pid_t child = testing::StartProcess(
      {testing::SelfPath(), "--gtest_filter=FlightRecorder.Sigusr1WritesADumpAndTheProcessRunsOn"},
      {{"FLIGHT_RECORDER_TEST_CHILD_DIR", dir}}, {}, "", "");
  const std::optional<int> status = testing::WaitFor(child, seconds(60));
  ASSERT_TRUE(status.has_value()) << "the child did not finish";
  ASSERT_TRUE(WIFEXITED(*status)) << "killed by signal " << WTERMSIG(*status);
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  absl::StatusOr<RankFlightRecord> dump = ReadFlightDump(DumpFilePath(dir, "pg3", 2));
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(dump->reason, "SIGUSR1");
  ASSERT_EQ(dump->entries.size(), 1u);
  EXPECT_EQ(dump->entries[0].state, FlightState::kStarted);
}

TEST(CollectiveBucketScope, NestsAndRestoresWhatItFound) {
  FlightRecorder recorder("pg9", "gloo", 0, 1, seconds(1), /*dir=*/"");
  EXPECT_EQ(recorder.ring_path(), "");  // memory only
  {
    CollectiveBucketScope outer(4);
    Issue(recorder, 0, AllReduceOf(1));
    {
      CollectiveBucketScope inner(5);
      Issue(recorder, 1, AllReduceOf(1));
    }
    Issue(recorder, 2, AllReduceOf(1));
  }
  Issue(recorder, 3, AllReduceOf(1));
  const RankFlightRecord r = recorder.Snapshot();
  ASSERT_EQ(r.entries.size(), 4u);
  EXPECT_EQ(r.entries[0].bucket, 4);
  EXPECT_EQ(r.entries[1].bucket, 5);
  EXPECT_EQ(r.entries[2].bucket, 4);
  EXPECT_EQ(r.entries[3].bucket, -1);
}

}  // namespace
}  // namespace tinyddp::dist
