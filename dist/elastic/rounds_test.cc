// The restart loop on scripted rounds: which endings restart, how often, and what it says.
#include "dist/elastic/rounds.h"

#include <algorithm>
#include <string>
#include <vector>

#include "dist/elastic/job_observer.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

// Runs RunRounds over `ends` (one per round; the last repeats) and returns the exit code, the rounds run
// and what it said.
int RunScripted(int max_restarts, const std::vector<RoundEnd>& ends, int* rounds, std::string* said) {
  *rounds = 0;
  CaptureStderr();
  const int code = RunRounds("test", max_restarts, [&](int round) {
    EXPECT_EQ(round, *rounds) << "rounds run in order";
    ++*rounds;
    return ends[std::min<size_t>(round, ends.size() - 1)];
  });
  *said = GetCapturedStderr();
  return code;
}

TEST(RunRounds, RestartsAFailedRoundUntilOneSucceeds) {
  int rounds = 0;
  std::string said;
  EXPECT_EQ(RunScripted(3, {{.exit_code = 5, .why = "rank 1 failed first"}, {}}, &rounds, &said), 0);
  EXPECT_EQ(rounds, 2);
  EXPECT_NE(said.find("test: round 0 failed: rank 1 failed first; restarting all workers (restart 1 of 3, "
                      "TINYDDP_RESTART_COUNT=1)"),
            std::string::npos)
      << said;
}

TEST(RunRounds, StopsWhenNoRestartIsLeftAndSaysSo) {
  int rounds = 0;
  std::string said;
  EXPECT_EQ(RunScripted(2, {{.exit_code = 5, .why = "boom"}}, &rounds, &said), 5);
  EXPECT_EQ(rounds, 3);
  EXPECT_NE(said.find("test: job failed: boom (no restarts left: --max_restarts=2); exiting with 5"), std::string::npos)
      << said;
}

TEST(RunRounds, NeverRestartsAPermanentFailureASignalOrAPreemption) {
  int rounds = 0;
  std::string said;
  EXPECT_EQ(RunScripted(3, {{.exit_code = kPermanentFailureExitCode, .why = "disk full", .permanent = true}}, &rounds, &said),
            kPermanentFailureExitCode);
  EXPECT_EQ(rounds, 1);
  EXPECT_NE(said.find("(not restarting: exit code 73 means a permanent error)"), std::string::npos) << said;

  EXPECT_EQ(RunScripted(3, {{.exit_code = 130, .why = "interrupted by SIGINT", .interrupted = true}}, &rounds, &said), 130);
  EXPECT_EQ(rounds, 1);
  EXPECT_NE(said.find("test: job failed: interrupted by SIGINT; exiting with 130"), std::string::npos) << said;

  EXPECT_EQ(RunScripted(3, {{.exit_code = kPreemptedExitCode, .why = "interrupted by SIGUSR1", .preempted = true}}, &rounds,
                &said),
            kPreemptedExitCode);
  EXPECT_EQ(rounds, 1);
  EXPECT_NE(said.find("test: job preempted: interrupted by SIGUSR1"), std::string::npos) << said;
}

TEST(RunRounds, ARoundThatSaidWhyItEndsTheJobEndsItQuietly) {
  int rounds = 0;
  std::string said;
  EXPECT_EQ(RunScripted(3, {{.exit_code = 2, .said = true}}, &rounds, &said), 2);
  EXPECT_EQ(rounds, 1);
  EXPECT_EQ(said, "");
}

}  // namespace
}  // namespace tinyddp::dist
