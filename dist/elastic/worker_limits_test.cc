// How many workers fit: the worker cap's
// refusals name every limit exceeded with how many would fit and the override; counts that fit pass; the
// machine's real capacity reads as sane numbers.
#include "dist/elastic/worker_limits.h"

#include <string>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

MachineCapacity Small() {
  MachineCapacity c;
  c.available_memory = int64_t{3} << 30;  // 3 GiB: 48 workers at 64 MiB
  c.max_user_threads = 1000;              // 250 workers at 4 threads
  c.max_pids = 32768;
  c.max_open_files = 1024;                // 128 workers at 8 descriptors
  return c;
}

TEST(WorkerLimits, ACountThatFitsPasses) {
  EXPECT_TRUE(CheckWorkerCount(4, Small(), false, 0, "--nproc_per_node=4", "--ignore_worker_limits").ok());
  EXPECT_TRUE(CheckWorkerCount(48, Small(), false, 0, "x", "").ok());
  EXPECT_TRUE(CheckWorkerCount(2, Small(), true, 2, "x", "").ok());
  EXPECT_TRUE(CheckWorkerCount(100000, MachineCapacity{}, false, 0, "x", "").ok()) << "unknown limits are not checked";
}

TEST(WorkerLimits, TooManyNamesEveryLimitItExceedsAndTheOverride) {
  const absl::Status s =
      CheckWorkerCount(100000, Small(), false, 0, "--nproc_per_node=100000", "--ignore_worker_limits");
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  const std::string m(s.message());
  for (const char* part : {"--nproc_per_node=100000: 100000 workers do not fit on this machine",
                           "3.0 GiB of available memory holds at most 48 at 64 MiB each",
                           "(ulimit -u 1000) allows at most 250", "(kernel.pid_max 32768) allows at most 8192",
                           "(ulimit -n 1024) supervises at most 128", "or pass --ignore_worker_limits"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << "\nin: " << m;
  }
  // Just over the memory limit: only that one is named.
  const std::string m49(CheckWorkerCount(49, Small(), false, 0, "TINYDDP_NPROC=49", "").message());
  EXPECT_NE(m49.find("holds at most 48"), std::string::npos) << m49;
  EXPECT_EQ(m49.find("ulimit"), std::string::npos) << m49;
}

TEST(WorkerLimits, NcclNeedsAGpuPerWorker) {
  const absl::Status s = CheckWorkerCount(3, Small(), true, 2, "--nproc=3", "--ignore_worker_limits");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("NCCL needs one GPU per worker and 2 are visible"), absl::string_view::npos) << s;
}

TEST(WorkerLimits, ThisMachinesCapacityIsReadable) {
  const MachineCapacity c = ReadMachineCapacity();
  EXPECT_GT(c.available_memory, int64_t{64} << 20) << "MemAvailable from /proc/meminfo";
  EXPECT_GT(c.max_pids, 100);
  EXPECT_NE(c.max_open_files, 0);
  // The tests' own jobs (3-4 CPU ranks) always fit.
  EXPECT_TRUE(CheckWorkerCount(4, c, false, 0, "x", "").ok());
}

}  // namespace
}  // namespace tinyddp::dist
