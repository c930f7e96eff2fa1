// SpawnWorkersIfNeeded with real processes: the test re-executes itself as a program that calls it
// (--as_program=MODE DIR), exactly as examples/ddp_mlp does in main(), and checks what its workers saw.
#include "dist/launch/spawn.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  absl::Status s = SpawnWorkersIfNeeded(argc, argv, {.nproc = 3});
  if (!s.ok()) {  // the workers could not even start
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 70;
  }
  // From here on this is a worker: the parent never returns from SpawnWorkersIfNeeded.
  const char* rank = std::getenv("RANK");
  t::WriteFile(absl::StrCat(dir, "/", rank), absl::StrCat(rank, " ", std::getenv("WORLD_SIZE"), " ",
                                                         std::getenv("MASTER_PORT"), " ", argv[argc - 1]));
  if (mode == "fail" && std::string(rank) == "2") return 5;
  return 0;
}

int RunSpawner(const std::string& mode, const std::string& dir, std::vector<std::pair<std::string, std::string>> env = {}) {
  pid_t pid = t::StartProcess({t::SelfPath(), "--as_program=" + mode, dir, "extra-arg"}, env, t::LauncherVariables(),
                              "", dir + "/err");
  auto status = t::WaitFor(pid, 60s);
  if (!status) return -1000;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -WTERMSIG(*status);
}

TEST(SpawnWorkersIfNeeded, StartsItsOwnRanksWithTheSameArguments) {
  const std::string dir = t::MakeTempDir();
  ASSERT_EQ(RunSpawner("ok", dir), 0) << t::ReadFile(dir + "/err");
  for (int r = 0; r < 3; ++r) {
    const std::string seen = t::ReadFile(absl::StrCat(dir, "/", r));
    ASSERT_FALSE(seen.empty()) << "rank " << r << " never ran";
    EXPECT_EQ(seen.rfind(absl::StrCat(r, " 3 "), 0), 0u) << seen;
    EXPECT_EQ(seen.substr(seen.size() - 10), " extra-arg") << "arguments are passed on: " << seen;
  }
}

TEST(SpawnWorkersIfNeeded, ExitsWithTheFailingRanksStatus) {
  const std::string dir = t::MakeTempDir();
  EXPECT_EQ(RunSpawner("fail", dir), 5);
  const std::string err = t::ReadFile(dir + "/err");
  EXPECT_NE(err.find("rank 2 (local rank 2"), std::string::npos) << err;
  EXPECT_NE(err.find("exit code 5"), std::string::npos) << err;
}

TEST(SpawnWorkersIfNeeded, HonoursTinyddpNproc) {
  const std::string dir = t::MakeTempDir();
  ASSERT_EQ(RunSpawner("ok", dir, {{"TINYDDP_NPROC", "2"}}), 0) << t::ReadFile(dir + "/err");
  EXPECT_FALSE(t::ReadFile(dir + "/1").empty());
  EXPECT_TRUE(t::ReadFile(dir + "/2").empty()) << "TINYDDP_NPROC=2 must start ranks 0 and 1 only";
  const std::string err = t::ReadFile(dir + "/err");
  EXPECT_NE(err.find("starting 2 worker(s) (TINYDDP_NPROC=2"), std::string::npos) << "says why 2: " << err;
}

TEST(SpawnWorkersIfNeeded, SaysHowManyWorkersItStartsAndWhy) {
  const std::string dir = t::MakeTempDir();
  ASSERT_EQ(RunSpawner("ok", dir), 0) << t::ReadFile(dir + "/err");
  const std::string err = t::ReadFile(dir + "/err");
  EXPECT_NE(err.find("starting 3 worker(s) (as the program asks"), std::string::npos) << err;
  EXPECT_NE(err.find("store at 127.0.0.1:"), std::string::npos) << err;
}

TEST(SpawnWorkersIfNeeded, RefusesAnAbsurdWorkerCountInOneLine) {
  const std::string dir = t::MakeTempDir();
  EXPECT_EQ(RunSpawner("ok", dir, {{"TINYDDP_NPROC", "100000"}}), 70);
  const std::string err = t::ReadFile(dir + "/err");
  EXPECT_NE(err.find("TINYDDP_NPROC=100000: more than the 1024 workers"), std::string::npos) << err;
  EXPECT_TRUE(t::ReadFile(dir + "/0").empty()) << "no worker started";
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
