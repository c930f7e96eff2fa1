// SpawnElasticWorkersIfNeeded with real processes: the test re-executes itself as a program that calls it
// (--as_program=MODE DIR), exactly as examples/ddp_mlp does in main(), and checks what this wing adds to
// the core's pieces (dist/launch/spawn_test.cc tests those): its rounds, the restart loop, the variables'
// check.
#include "dist/elastic/spawn.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using namespace std::chrono_literals;
namespace t = ::tinyddp::dist::testing;

int RunProgram(int argc, char** argv, const std::string& mode, const std::string& dir) {
  absl::Status s = SpawnElasticWorkersIfNeeded(argc, argv, {.spawn = {.nproc = 3}, .max_restarts = mode == "permanent" ? 2 : 0});
  if (!s.ok()) return 70;  // the workers could not even start
  // From here on this is a worker: the parent never returns from SpawnElasticWorkersIfNeeded.
  const char* rank = std::getenv("RANK");
  t::WriteFile(absl::StrCat(dir, "/", rank), absl::StrCat(rank, " ", std::getenv("WORLD_SIZE"), " ",
                                                         std::getenv("MASTER_PORT"), " ", argv[argc - 1]));
  if (mode == "fail" && std::string(rank) == "2") return 5;
  if (mode == "permanent") {
    std::ofstream(dir + "/starts", std::ios::app) << rank << "\n";
    if (std::string(rank) == "2") return 73;  // a full disk, say: restarting cannot help
    ::usleep(200000);
  }
  return 0;
}

int RunSpawner(const std::string& mode, const std::string& dir, std::vector<std::pair<std::string, std::string>> env = {}) {
  pid_t pid = t::StartProcess({t::SelfPath(), "--as_program=" + mode, dir, "extra-arg"}, env, t::LauncherVariables(),
                              "", dir + "/err");
  auto status = t::WaitFor(pid, 60s);
  if (!status) return -1000;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -WTERMSIG(*status);
}

// How many workers and their variables come from the core's pieces (CountSpawnWorkers, StartSpawnedJob:
// dist/launch/spawn_test.cc tests them, TINYDDP_NPROC included); here, that a round of this wing starts
// them all with the program's arguments, and its own announcement.
TEST(SpawnElasticWorkersIfNeeded, StartsItsOwnRanksWithTheSameArgumentsAndSaysHowManyAndWhy) {
  const std::string dir = t::MakeTempDir();
  ASSERT_EQ(RunSpawner("ok", dir), 0) << t::ReadFile(dir + "/err");
  for (int r = 0; r < 3; ++r) {
    const std::string seen = t::ReadFile(absl::StrCat(dir, "/", r));
    ASSERT_FALSE(seen.empty()) << "rank " << r << " never ran";
    EXPECT_EQ(seen.rfind(absl::StrCat(r, " 3 "), 0), 0u) << seen;
    EXPECT_EQ(seen.substr(seen.size() - 10), " extra-arg") << "arguments are passed on: " << seen;
  }
  const std::string err = t::ReadFile(dir + "/err");
  EXPECT_NE(err.find("starting 3 worker(s) (as the program asks"), std::string::npos) << err;
  EXPECT_NE(err.find("store at 127.0.0.1:"), std::string::npos) << err;
}

TEST(SpawnElasticWorkersIfNeeded, ExitsWithTheFailingRanksStatus) {
  const std::string dir = t::MakeTempDir();
  EXPECT_EQ(RunSpawner("fail", dir), 5);
  const std::string err = t::ReadFile(dir + "/err");
  EXPECT_NE(err.find("rank 2 (local rank 2"), std::string::npos) << err;
  EXPECT_NE(err.find("exit code 5"), std::string::npos) << err;
}

TEST(SpawnElasticWorkersIfNeeded, DoesNotRestartAPermanentFailure) {
  const std::string dir = t::MakeTempDir();
  EXPECT_EQ(RunSpawner("permanent", dir), 73);
  const std::string err = t::ReadFile(dir + "/err");
  // One round only: rank 2 started once (the others may have been stopped before they wrote).
  const std::string starts = t::ReadFile(dir + "/starts");
  EXPECT_EQ(std::count(starts.begin(), starts.end(), '2'), 1) << starts << err;
  EXPECT_LE(std::count(starts.begin(), starts.end(), '\n'), 3) << starts << err;
  EXPECT_NE(err.find("(not restarting: exit code 73 means a permanent error)"), std::string::npos) << err;
}

TEST(SpawnElasticWorkersIfNeeded, NamesAMisspelledTinyddpVariable) {
  const std::string dir = t::MakeTempDir();
  ASSERT_EQ(RunSpawner("ok", dir, {{"TINYDDP_NPORC", "2"}}), 0) << t::ReadFile(dir + "/err");
  EXPECT_NE(
      t::ReadFile(dir + "/err").find("spawn: TINYDDP_NPORC is not a tinyddp variable; did you mean TINYDDP_NPROC?"),
      std::string::npos)
      << t::ReadFile(dir + "/err");
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  if (argc >= 3 && std::strncmp(argv[1], "--as_program=", 13) == 0) {
    return tinyddp::dist::RunProgram(argc, argv, argv[1] + 13, argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
