// JobRecords, the launcher's side of the flight recorder: a failed job's records stay where the user can
// find them, but not for good (the newest few jobs' are kept, older ones go as a new job starts, unless
// their launcher still runs), and a round that failed before its first collective says so and leaves nothing.
#include "dist/observe/flight_recorder/job_records.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

namespace t = ::tinyddp::dist::testing;
namespace fs = std::filesystem;

// A pid that no process has any more: a child's, once reaped.
pid_t DeadPid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// A fresh $TMPDIR, so that the default folder is this test's own.
std::string FreshTmpdir() {
  const std::string tmp = t::MakeTempDir();
  ::setenv("TMPDIR", tmp.c_str(), 1);
  ::unsetenv("TINYDDP_FLIGHT_RECORDER_DIR");
  return tmp;
}

int JobFolders(const std::string& parent) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) n += entry.is_directory() ? 1 : 0;
  return n;
}

TEST(JobRecords, KeepsTheNewestFailedJobsRecordsAndRemovesOlderOnes) {
  const std::string parent = FreshTmpdir() + "/tinyddp-flight-recorder";
  fs::create_directories(parent);
  const pid_t dead = DeadPid();
  for (int i = 0; i < 8; ++i) {  // eight failed jobs, oldest first, each with its records
    const std::string job = absl::StrCat(parent, "/job-20260101-00000", i, "-", dead, "-abc123");
    fs::create_directories(job + "/round0");
    t::WriteFile(job + "/round0/pg0.rank0.ring", "ring");
  }
  const std::string running = absl::StrCat(parent, "/job-20250101-000000-", ::getpid(), "-abc123");
  fs::create_directories(running);  // the oldest, but its launcher (this process) still runs

  auto records = JobRecords::ForThisJob();
  const auto env = records->WorkerEnvironment(0, 0);
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env[0].second.rfind(parent + "/job-", 0), 0u) << env[0].second;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(fs::exists(absl::StrCat(parent, "/job-20260101-00000", i, "-", dead, "-abc123")), i >= 3)
        << "job " << i << ": the newest 5 are kept, older ones removed";
  }
  EXPECT_TRUE(fs::exists(running)) << "a job whose launcher runs is never removed";
  EXPECT_EQ(JobFolders(parent), 5 + 1 + 1);
}

TEST(JobRecords, ARoundWithoutCollectivesSaysSoAndLeavesNothing) {
  const std::string parent = FreshTmpdir() + "/tinyddp-flight-recorder";
  auto records = JobRecords::ForThisJob();
  const std::string round_dir = records->WorkerEnvironment(0, 0).at(0).second;  // no worker wrote into it
  ::testing::internal::CaptureStderr();
  records->FailedRound(0, "launch: ", {0, 1});
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said, "launch: flight recorder: no collective was issued\n");
  records->Finish(/*job_succeeded=*/false);
  EXPECT_EQ(JobFolders(parent), 0) << "nothing recorded, nothing kept";
}

}  // namespace
}  // namespace tinyddp::dist
