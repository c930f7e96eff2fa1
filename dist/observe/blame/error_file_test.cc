// Error files: the kind each Status code reports, a record read back as written (message with newlines
// and quotes included), nothing written without TINYDDP_ERROR_FILE, and garbage read as "no file".
#include "dist/observe/blame/error_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

std::string TempPath(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/" + name;
}

TEST(ErrorFile, TheKindComesFromTheStatusCode) {
  EXPECT_EQ(FailureKindOf(absl::DeadlineExceededError("x")), FailureKind::kTimeout);
  EXPECT_EQ(FailureKindOf(absl::UnavailableError("peer closed")), FailureKind::kPeer);
  EXPECT_EQ(FailureKindOf(absl::AbortedError("another rank failed")), FailureKind::kPeer);
  EXPECT_EQ(FailureKindOf(absl::InvalidArgumentError("bad data")), FailureKind::kError);
  EXPECT_EQ(FailureKindOf(absl::DataLossError("nan")), FailureKind::kError);
}

TEST(ErrorFile, ARecordReadsBackAsWritten) {
  const std::string path = TempPath("rank-3.json");
  ::setenv(kErrorFileEnv, path.c_str(), 1);
  RecordWorkerFailure(3, absl::DeadlineExceededError("waited 20s for \"rank 1\"\nsecond line"));
  ::unsetenv(kErrorFileEnv);
  const std::optional<WorkerFailure> f = ReadWorkerFailure(path);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->kind, FailureKind::kTimeout);
  EXPECT_EQ(f->message, "waited 20s for \"rank 1\"\nsecond line");
  EXPECT_GT(f->time_us, int64_t{1600000000} * 1000000) << "wall-clock microseconds";
  EXPECT_EQ(FirstLine(f->message), "waited 20s for \"rank 1\"");
  EXPECT_EQ(FirstLine(std::string(500, 'x'), 10), "xxxxxxxxxx...");
}

TEST(ErrorFile, NothingIsWrittenWithoutTheVariableAndGarbageIsNoRecord) {
  ::unsetenv(kErrorFileEnv);
  RecordWorkerFailure(0, absl::InternalError("not recorded anywhere"));  // must not crash or write
  EXPECT_FALSE(ReadWorkerFailure(TempPath("absent.json")).has_value());
  const std::string garbage = TempPath("garbage.json");
  std::ofstream(garbage) << "{\"rank\": 1, \"kind\": \"err";  // a worker killed mid-write
  EXPECT_FALSE(ReadWorkerFailure(garbage).has_value());
}

}  // namespace
}  // namespace tinyddp::dist
