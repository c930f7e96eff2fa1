// The demos print exactly what their headers promise: each binary is run as a user would run it (it
// starts its own workers) and its standard output is compared line for line.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tinyddp {
namespace {

// The demo binary: in Bazel's runfiles, or beside this test when run by hand (e.g. on the GPU machine).
std::string DemoPath(const std::string& name) {
  if (const char* src = std::getenv("TEST_SRCDIR")) return absl::StrCat(src, "/tinyddp/examples/", name);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : ".";
  return dir.substr(0, dir.rfind('/')) + "/" + name;
}

// Standard output of `demo` started with `env` (the spawner's progress line goes to stderr, not here).
std::string RunDemo(const std::string& demo, const std::string& env, const std::string& args, int* exit_code) {
  const std::string cmd = absl::StrCat(env, " timeout 300 ", DemoPath(demo), " ", args);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p == nullptr) return out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
  const int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(AllReduceDemo, TwoRanksPrintTheTutorialOutputExactly) {
  // Default launch: one rank per GPU where there are two (NCCL), else 2 CPU ranks (Gloo); same output.
  int code = 0;
  const std::string out = RunDemo("all_reduce_demo", "TINYDDP_NPROC=2", "", &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out,
            "Before reduce: Rank 0: [1, 1, 1]\n"
            "Before reduce: Rank 1: [2, 2, 2]\n"
            "After reduce: Rank 0: [3, 3, 3]\n"
            "After reduce: Rank 1: [3, 3, 3]\n");
}

TEST(AllReduceDemo, FourRanksOverGlooSumToTen) {
  int code = 0;
  const std::string out = RunDemo("all_reduce_demo", "TINYDDP_NPROC=4", "--backend=gloo", &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out,
            "Before reduce: Rank 0: [1, 1, 1]\n"
            "Before reduce: Rank 1: [2, 2, 2]\n"
            "Before reduce: Rank 2: [3, 3, 3]\n"
            "Before reduce: Rank 3: [4, 4, 4]\n"
            "After reduce: Rank 0: [10, 10, 10]\n"
            "After reduce: Rank 1: [10, 10, 10]\n"
            "After reduce: Rank 2: [10, 10, 10]\n"
            "After reduce: Rank 3: [10, 10, 10]\n");
}

TEST(CollectivesDemo, ThreeGlooRanksShowEachCollectiveBeforeAndAfter) {
  int code = 0;
  const std::string out = RunDemo("collectives_demo", "TINYDDP_NPROC=3", "--backend=gloo", &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out,
            "3 ranks, backend gloo, tensors on cpu\n"
            "\n== Broadcast from rank 0 ==\n"
            "Before broadcast: Rank 0: [7, 8, 9]\n"
            "Before broadcast: Rank 1: [0, 0, 0]\n"
            "Before broadcast: Rank 2: [0, 0, 0]\n"
            "After broadcast: Rank 0: [7, 8, 9]\n"
            "After broadcast: Rank 1: [7, 8, 9]\n"
            "After broadcast: Rank 2: [7, 8, 9]\n"
            "\n== AllGather ==\n"
            "Before all_gather: Rank 0: [0, 0]\n"
            "Before all_gather: Rank 1: [1, 1]\n"
            "Before all_gather: Rank 2: [2, 2]\n"
            "After all_gather: Rank 0: [0, 0, 1, 1, 2, 2]\n"
            "After all_gather: Rank 1: [0, 0, 1, 1, 2, 2]\n"
            "After all_gather: Rank 2: [0, 0, 1, 1, 2, 2]\n"
            "\n== ReduceScatter (SUM) ==\n"
            "Before reduce_scatter: Rank 0: [1, 2, 3, 4, 5, 6]\n"
            "Before reduce_scatter: Rank 1: [2, 4, 6, 8, 10, 12]\n"
            "Before reduce_scatter: Rank 2: [3, 6, 9, 12, 15, 18]\n"
            "After reduce_scatter: Rank 0: [6, 12]\n"
            "After reduce_scatter: Rank 1: [18, 24]\n"
            "After reduce_scatter: Rank 2: [30, 36]\n"
            "\n== AllReduce (SUM) ==\n"
            "Before all_reduce: Rank 0: [1, 10]\n"
            "Before all_reduce: Rank 1: [2, 20]\n"
            "Before all_reduce: Rank 2: [3, 30]\n"
            "After all_reduce: Rank 0: [6, 60]\n"
            "After all_reduce: Rank 1: [6, 60]\n"
            "After all_reduce: Rank 2: [6, 60]\n");
}

}  // namespace
}  // namespace tinyddp
