// RunOnRanks: runs part of a gtest body on N ranks, each a fresh process of the test binary itself, so
// collective tests exercise real processes, real sockets and a real TCPStore, inside or outside Bazel.
//
//   TEST(ProcessGroupGloo, AllReduceSumsAcrossRanks) {
//     RunOnRanks(3, [](const RankContext& ctx) {
//       auto pg = ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
//       ...  EXPECT_/ASSERT_ as usual: they run in the rank's process
//     });
//   }
//
// The test process (the parent) hosts a TCPStoreServer on a free port and re-executes this binary once
// per rank with --gtest_filter=<the current test> and launcher-style variables (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TINYDDP_LAUNCHER_STORE=1). A child runs the test body until it
// reaches the RunOnRanks call it was started for (a test may call RunOnRanks several times, e.g. for
// 2, 3 and 4 ranks), runs the lambda on its rank and exits: 0 when no expectation failed. The parent
// fails the test for every rank that failed, exited by a signal, or outlived `timeout`, printing that
// rank's output. When one rank fails, the others get a grace period and are then killed, so a broken
// collective never hangs the test.
#ifndef TINYDDP_DIST_TESTING_MULTI_PROCESS_H_
#define TINYDDP_DIST_TESTING_MULTI_PROCESS_H_

#include <chrono>
#include <functional>
#include <memory>

#include "dist/store/store.h"

namespace tinyddp::dist::testing {

struct RankContext {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<Store> store;  // the job's TCPStore (hosted by the test process)
};

struct RunOptions {
  /// How long all ranks together may take before they are killed and the test fails.
  std::chrono::milliseconds timeout = std::chrono::seconds(240);
  /// After the first rank fails, how long the others may go on before they are killed.
  std::chrono::milliseconds grace = std::chrono::seconds(10);
};

/// In the test process: runs `body` on `world_size` child processes and records a gtest failure for each
/// rank that did not succeed. In a child: runs `body` if this is the call the child was started for,
/// then exits the process. Precondition: called from a gtest test body, world_size >= 1.
void RunOnRanks(int world_size, const std::function<void(const RankContext&)>& body, RunOptions options = {});

/// True inside a child started by RunOnRanks.
bool IsRankProcess();

}  // namespace tinyddp::dist::testing

#endif  // TINYDDP_DIST_TESTING_MULTI_PROCESS_H_
