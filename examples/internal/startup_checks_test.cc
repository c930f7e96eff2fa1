// Startup checks on real folders: writable paths pass and leave nothing behind; an unwritable folder,
// a missing parent or a read-only file is refused naming the flag and the path; stale temporaries are
// removed and reported; a fresh run refuses a folder holding another run's checkpoints.
#include "examples/internal/startup_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "examples/internal/durable_file.h"
#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/startup_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

size_t Entries(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().empty() ? 0 : 1;
  return n;
}

TEST(StartupChecks, WritablePathsPassAndLeaveNothingBehind) {
  const std::string dir = FreshDir("ok");
  EXPECT_TRUE(CheckWritableFolder(dir + "/new/ckpt", "checkpoint_dir").ok());
  EXPECT_TRUE(fs::is_directory(dir + "/new/ckpt")) << "the folder is created";
  EXPECT_EQ(Entries(dir + "/new/ckpt"), 0u);
  EXPECT_TRUE(CheckWritableFile(dir + "/trace.json", "trace").ok());
  EXPECT_FALSE(fs::exists(dir + "/trace.json"));
  ASSERT_TRUE(WriteFileDurably(dir + "/old.json", "keep me").ok());
  EXPECT_TRUE(CheckWritableFile(dir + "/old.json", "trace").ok());
  EXPECT_EQ(ReadWholeFile(dir + "/old.json").value(), "keep me") << "an existing file is not truncated";
}

TEST(StartupChecks, UnwritablePathsAreRefusedNamingTheFlagAndPath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write anywhere; permission checks cannot fail";
  const std::string dir = FreshDir("locked");
  fs::create_directories(dir + "/ro");
  ASSERT_EQ(::chmod((dir + "/ro").c_str(), 0500), 0);
  const absl::Status folder = CheckWritableFolder(dir + "/ro", "checkpoint_dir");
  EXPECT_TRUE(absl::IsFailedPrecondition(folder)) << folder;
  EXPECT_NE(folder.message().find("--checkpoint_dir=" + dir + "/ro: cannot write there (Permission denied)"),
            std::string::npos)
      << folder;
  const absl::Status file = CheckWritableFile(dir + "/ro/trace.json", "trace");
  EXPECT_NE(file.message().find("--trace=" + dir + "/ro/trace.json: cannot write it (Permission denied)"),
            std::string::npos)
      << file;
  ::chmod((dir + "/ro").c_str(), 0700);
}

TEST(StartupChecks, MissingParentsAndFilesInTheWayAreRefused) {
  const std::string dir = FreshDir("missing");
  const absl::Status file = CheckWritableFile(dir + "/no/such/trace.json", "trace");
  EXPECT_NE(file.message().find("the folder " + dir + "/no/such does not exist"), std::string::npos) << file;
  ASSERT_TRUE(WriteFileDurably(dir + "/plain", "a file").ok());
  const absl::Status folder = CheckWritableFolder(dir + "/plain/ckpt", "checkpoint_dir");
  EXPECT_NE(folder.message().find("--checkpoint_dir=" + dir + "/plain/ckpt: cannot create the folder"),
            std::string::npos)
      << folder;
}

TEST(StartupChecks, StaleTemporariesAreRemovedAndAFreshRunRefusesAnotherRunsCheckpoints) {
  const std::string dir = FreshDir("prepare");
  TrainOptions o;
  o.checkpoint_dir = dir + "/ckpt";
  fs::create_directories(o.checkpoint_dir + "/.tmp-step-00000040-999");
  absl::StatusOr<std::vector<std::string>> notes = PrepareOutputs(o, /*resuming=*/false);
  ASSERT_TRUE(notes.ok()) << notes.status();
  ASSERT_EQ(notes->size(), 1u);
  EXPECT_NE((*notes)[0].find(".tmp-step-00000040-999, a checkpoint left half-written"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.checkpoint_dir + "/.tmp-step-00000040-999"));

  fs::create_directories(o.checkpoint_dir + "/step-00000019");
  const absl::StatusOr<std::vector<std::string>> fresh = PrepareOutputs(o, false);
  EXPECT_NE(fresh.status().message().find("already holds checkpoints of a run"), std::string::npos) << fresh.status();
  EXPECT_TRUE(PrepareOutputs(o, /*resuming=*/true).ok());
}

}  // namespace
}  // namespace tinyddp::examples
