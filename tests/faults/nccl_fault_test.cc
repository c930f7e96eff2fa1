// A rank killed inside a DDP bucket's NCCL all_reduce, on two GPUs: `launch` runs two ranks of ddp_mlp over
// NCCL, rank 1 dies by SIGKILL right after it issued collective #40 (a bucket's all_reduce, its kernel
// already on the GPU), and rank 0 is left inside that kernel waiting for a peer that is gone. What must
// follow: rank 0's watchdog fails the collective within --timeout (or NCCL reports the dead peer first),
// rank 0 exits through its error path (never SIGABRT), the launcher ends the job, and the flight
// recorder's verdict names collective #40 and rank 1. Needs two GPUs; skips with the reason otherwise.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tests/faults/fault_job.h"

namespace tinyddp::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

TEST(NcclFaults, RankKilledInsideABucketAllReduceEndsTheJobWithinTheTimeoutAndIsNamed) {
  if (cuda::DeviceCount() < 2) {
    GTEST_SKIP() << "needs two GPUs (one per rank; NCCL refuses two ranks on one GPU); " << cuda::DeviceCount()
                 << " visible";
  }
  const auto t0 = std::chrono::steady_clock::now();
  Job job = StartJob(LaunchArgv({"--nproc_per_node=2", "--timeout=10s", "--grace_seconds=2"}, TinyTrainingJob("nccl")),
                     {{"TINYDDP_FAULT", "rank=1,point=collective,step=40,action=kill"}, {"NCCL_NVLS_ENABLE", "0"}});
  const Ended e = WaitJob(job, std::chrono::seconds(300));
  std::printf("NCCL rank killed inside a collective: the job was gone %.1f s after it started (--timeout=10s)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const std::string out = job.Output();
  ASSERT_TRUE(e.finished) << out;
  EXPECT_NE(e.value, 0) << out;
  EXPECT_FALSE(Contains(out, "SIGABRT")) << out;
  EXPECT_FALSE(Contains(out, "Aborted")) << out;
  EXPECT_TRUE(Contains(out, "rank 1 (local rank 1")) << out;
  std::string verdict;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "launch: flight recorder (")) verdict = std::string(line);
  }
  EXPECT_TRUE(Contains(verdict, "collective #40 AllReduce(float32 [1042], AVG) (bucket 0, 4.1 KiB): ")) << out;
  EXPECT_TRUE(Contains(verdict, "ranks {1} never started it") ||
              Contains(verdict, "ranks {1} started it and recorded no end"))
      << out;
}

}  // namespace
}  // namespace tinyddp::testing
