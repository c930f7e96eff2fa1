// The demos print exactly what their headers promise: each binary is run as a user would run it (it
// starts its own workers) and its standard output is compared line for line. Outside Bazel (the GPU
// runner, tools/run_gpu_tests.sh) the demos are found beside this test's binary.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"

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

// Standard output of `demo` started with `env` (the spawner's progress line goes to stderr, not here, or to
// `stderr_path` when one is given).
std::string RunDemo(const std::string& demo, const std::string& env, const std::string& args, int* exit_code,
                    const std::string& stderr_path = "") {
  std::string cmd = absl::StrCat(env, " timeout 300 ", DemoPath(demo), " ", args);
  if (!stderr_path.empty()) absl::StrAppend(&cmd, " 2>", stderr_path);
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

// The tutorial's output for `n` ranks: rank r holds [r+1]*3, all end with the sum.
std::string AllReduceOutput(int n) {
  std::string out;
  for (int r = 0; r < n; ++r) {
    absl::StrAppend(&out, "Before reduce: Rank ", r, ": [", r + 1, ", ", r + 1, ", ", r + 1, "]\n");
  }
  const int sum = n * (n + 1) / 2;
  for (int r = 0; r < n; ++r) {
    absl::StrAppend(&out, "After reduce: Rank ", r, ": [", sum, ", ", sum, ", ", sum, "]\n");
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, got);
    std::fclose(f);
  }
  return text;
}

TEST(AllReduceDemo, TwoRanksPrintTheTutorialOutputExactly) {
  // Backend auto: NCCL where there is a GPU for each of the two ranks, else Gloo on CPU; the same output.
  int code = 0;
  const std::string out = RunDemo("all_reduce_demo", "TINYDDP_NPROC=2", "", &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out,
            "Before reduce: Rank 0: [1, 1, 1]\n"
            "Before reduce: Rank 1: [2, 2, 2]\n"
            "After reduce: Rank 0: [3, 3, 3]\n"
            "After reduce: Rank 1: [3, 3, 3]\n");
}

TEST(AllReduceDemo, MoreRanksThanGpusFallBackToGlooWithOneNoticeAndTheSameOutput) {
  const int gpus = cuda::DeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device: backend auto is Gloo anyway (checked by the test above)";
  const int n = gpus + 1;  // one rank would find no cuda:LOCAL_RANK
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string err_path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/all_reduce_demo_", getpid(), ".err");
  int code = 0;
  const std::string out = RunDemo("all_reduce_demo", absl::StrCat("TINYDDP_NPROC=", n), "", &code, err_path);
  const std::string err = ReadAll(err_path);
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(out, AllReduceOutput(n)) << "stdout stays the tutorial's; stderr:\n" << err;
  const std::string notice = absl::StrCat("backend auto: ", n, " ranks on this machine but ", gpus, " GPU(s), so gloo");
  EXPECT_TRUE(absl::StrContains(err, notice)) << err;
  EXPECT_EQ(err.find(notice), err.rfind(notice)) << "said once, not once per rank:\n" << err;
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

// uneven_inputs prints numbers that vary from run to run (a collective's sequence number, the weights'
// checksum); everything else is checked line for line. popen's pipe reaches its end only once every process
// holding it has exited, the workers included, so a returning RunDemo also shows that nothing is left running.
std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n', absl::SkipEmpty()); }

// The checksum at the end of "rank r: trained ... weights checksum -11.158177".
std::string ChecksumOf(const std::string& line) { return line.substr(line.rfind(' ') + 1); }

TEST(UnevenInputsDemo, PlainDdpHangsUntilTheTimeoutThenJoinFinishesWithTheSameWeightsEverywhere) {
  int code = 0;
  const std::string out = RunDemo("uneven_inputs", "", "", &code);  // 3 ranks: 2, 4 and 3 batches
  EXPECT_EQ(code, 0) << out;
  const std::vector<std::string> lines = Lines(out);
  ASSERT_EQ(lines.size(), 16u) << out;
  // Part 1: rank 0 runs out after 2 steps; ranks 1 and 2 wait for it in DDP's all_reduce at step 3.
  EXPECT_EQ(lines[0], "== Part 1: plain DDP, ranks with 2, 4, 3 batches; the group's timeout is 3 s ==");
  EXPECT_EQ(lines[1], "rank 0: trained its 2 batches, ran out of data and left the loop; it waits for the others at "
                      "the next collective");
  for (int r : {1, 2}) {
    const std::string& said = lines[2 + 2 * (r - 1)];
    const std::string& error = lines[3 + 2 * (r - 1)];
    EXPECT_EQ(said, absl::StrCat("rank ", r, ": had ", r == 1 ? 4 : 3, " batches; at step 3 its backward waited in "
                                 "DDP's gradient all_reduce for rank 0, which had run out of data, until the 3 s "
                                 "timeout ended the wait (DEADLINE_EXCEEDED):"));
    EXPECT_TRUE(absl::StartsWith(error, absl::StrCat("    DistributedDataParallel: all_reduce of bucket 0 on rank ", r,
                                                     " failed: AllReduce(float32 [1732], AVG) #")))
        << error;
    EXPECT_TRUE(absl::EndsWith(error, absl::StrCat(" on gloo rank ", r, "/3 timed out after 3000 ms"))) << error;
  }
  EXPECT_TRUE(absl::StartsWith(lines[6], "Without Join, the ranks with more data wait in DDP's all_reduce")) << out;
  // Part 2: every step, who trains and who shadows; every rank ends with the same weights.
  EXPECT_EQ(lines[7], "== Part 2: the same uneven inputs with Join (dist/parallel/join/join.h) ==");
  EXPECT_EQ(lines[8], "step 1: ranks 0, 1, 2 train");
  EXPECT_EQ(lines[9], "step 2: ranks 0, 1, 2 train");
  EXPECT_EQ(lines[10], "step 3: ranks 1, 2 train, rank 0 shadows");
  EXPECT_EQ(lines[11], "step 4: rank 1 trains, ranks 0, 2 shadow");
  EXPECT_TRUE(absl::StartsWith(lines[12], "rank 0: trained 2 steps, shadowed 2; weights checksum ")) << lines[12];
  EXPECT_TRUE(absl::StartsWith(lines[13], "rank 1: trained 4 steps, shadowed 0; weights checksum ")) << lines[13];
  EXPECT_TRUE(absl::StartsWith(lines[14], "rank 2: trained 3 steps, shadowed 1; weights checksum ")) << lines[14];
  double checksum = 0;
  EXPECT_TRUE(absl::SimpleAtod(ChecksumOf(lines[12]), &checksum)) << lines[12];
  EXPECT_EQ(ChecksumOf(lines[13]), ChecksumOf(lines[12]));
  EXPECT_EQ(ChecksumOf(lines[14]), ChecksumOf(lines[12]));
  EXPECT_EQ(lines[15], "Every rank finished all 4 steps and holds the same weights, bit for bit.");
}

TEST(UnevenInputsDemo, TwoRanksAndAShorterTimeoutFromTheFlags) {
  int code = 0;
  const std::string out = RunDemo("uneven_inputs", "", "--batches=1,3 --hang_timeout_s=4", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "rank 1: had 3 batches; at step 2 its backward waited in DDP's gradient "
                                     "all_reduce for rank 0, which had run out of data, until the 4 s timeout"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "step 3: rank 1 trains, rank 0 shadows\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "rank 0: trained 1 steps, shadowed 2; weights checksum ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Every rank finished all 3 steps and holds the same weights, bit for bit."))
      << out;
}

TEST(UnevenInputsDemo, ABadBatchesFlagIsRefusedWithExitStatusTwo) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string err_path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/uneven_inputs_", getpid(), ".err");
  int code = 0;
  const std::string out = RunDemo("uneven_inputs", "", "--batches=4", &code, err_path);
  EXPECT_EQ(code, 2);
  EXPECT_EQ(out, "");
  EXPECT_TRUE(absl::StrContains(ReadAll(err_path), "--batches=4: give one count per rank, at least 2"))
      << ReadAll(err_path);
}

}  // namespace
}  // namespace tinyddp
