// Blame on a round's exits and error files, without processes: the root cause is the rank that failed on
// its own (not the first exit), a timeout's suspect is the rank that never timed out, and only a timeout
// holds the stop back. launcher_failures_test runs the same with real workers and a real launcher.
#include "dist/observe/blame/blame.h"

#include <signal.h>

#include <cstdlib>

#include "dist/observe/blame/error_file.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

// Rank `rank` of round 0 writes `status` to the error file `blame` gave it, as a worker would.
void Record(Blame& blame, int rank, const absl::Status& status) {
  ::setenv(kErrorFileEnv, blame.WorkerEnvironment(0, rank).at(0).second.c_str(), 1);
  RecordWorkerFailure(rank, status);
  ::unsetenv(kErrorFileEnv);
}

WorkerExit Exit(int rank, int code, int64_t time_us, bool stopped = false) {
  return {.rank = rank, .local_rank = rank, .pid = 100 + rank, .value = code, .stopped = stopped, .time_us = time_us};
}

TEST(Blame, AnOwnFailureBeatsTheEarlierExitsOfThoseWhoGaveWay) {
  Blame blame("test");
  Record(blame, 0, absl::UnavailableError("AllReduce: connection closed by peer (rank 1)"));
  Record(blame, 1, absl::InternalError("disk full while writing shard 7"));
  JobResult result;
  result.exits = {Exit(0, 1, 1000), Exit(1, 3, 2000), Exit(2, 0, 3000)};
  blame.Judge(result);
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->rank, 1);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.cause_order, 0);
  EXPECT_EQ(result.reason,
            "rank 1 (local rank 1, pid 101) failed first: exit code 3 (error: disk full while writing shard 7)");
}

TEST(Blame, AfterATimeoutTheRankThatNeverTimedOutIsTheSuspect) {
  Blame blame("test");
  Record(blame, 0, absl::DeadlineExceededError("AllReduce waited 3s for rank 1\nmore"));
  Record(blame, 2, absl::DeadlineExceededError("AllReduce waited 3s for rank 1"));
  JobResult result;
  result.exits = {Exit(0, 1, 1000), Exit(1, 0, 5000, /*stopped=*/true), Exit(2, 1, 1100)};
  blame.Judge(result);
  EXPECT_EQ(result.cause_order, 1);
  EXPECT_EQ(result.reason,
            "rank 0 (local rank 0, pid 100) failed first: exit code 1 (timeout: AllReduce waited 3s for rank 1); "
            "suspect rank 1 (still running when the others gave up: hung or stuck?)");
}

TEST(Blame, OnlyATimeoutHoldsTheStopAndAnOwnFailureNeverDoes) {
  Blame blame("test", std::chrono::milliseconds(700));
  Record(blame, 0, absl::DeadlineExceededError("waited"));
  Record(blame, 1, absl::AbortedError("another rank failed"));
  Record(blame, 2, absl::InternalError("bad batch"));
  EXPECT_EQ(blame.HoldStop(Exit(0, 1, 1), /*holding=*/false).count(), 700);
  EXPECT_EQ(blame.HoldStop(Exit(1, 1, 2), /*holding=*/false).count(), 0) << "giving way alone stops the job";
  EXPECT_EQ(blame.HoldStop(Exit(1, 1, 2), /*holding=*/true).count(), 700) << "part of the same timeout";
  EXPECT_EQ(blame.HoldStop(Exit(2, 1, 3), /*holding=*/true).count(), 0);
  EXPECT_EQ(blame.HoldStop(Exit(3, 1, 4), /*holding=*/false).count(), 0) << "no error file: an own failure";
}

TEST(Blame, ACauseElsewhereIsLeftToTheOtherNodes) {
  Blame blame("test");
  Record(blame, 0, absl::UnavailableError("connection closed"));
  JobResult result;
  result.stop_requested = true;
  result.cause_order = 0;
  result.exits = {Exit(0, 1, 1000), Exit(1, SIGTERM, 1200, /*stopped=*/true)};
  result.exits[1].signaled = true;
  blame.Judge(result);
  EXPECT_FALSE(result.cause_order.has_value());
}

}  // namespace
}  // namespace tinyddp::dist
