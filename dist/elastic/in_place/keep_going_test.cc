#include "dist/elastic/in_place/keep_going.h"

#include "gtest/gtest.h"

namespace tinyddp::dist::in_place {
namespace {

WorkerExit Exit(int rank, bool signaled, int value) {
  WorkerExit exit;
  exit.rank = rank;
  exit.signaled = signaled;
  exit.value = value;
  return exit;
}

TEST(KeepGoingAfterLoss, HoldsTheStopAndCountsAJobSomeWorkerFinishedAsASuccess) {
  KeepGoingAfterLoss keep_going;
  EXPECT_GE(keep_going.HoldStop(Exit(1, true, 9), false), std::chrono::hours(24));
  JobResult result;
  result.exit_code = 137;
  result.exits = {Exit(0, false, 0), Exit(1, true, 9), Exit(2, false, 0), Exit(3, false, 1)};
  keep_going.Judge(result);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.reason.find("finished by replicas 0,2 after losing 1,3"), std::string::npos) << result.reason;
}

TEST(KeepGoingAfterLoss, AJobNobodyFinishedStaysFailedAndAnInterruptedOneStaysInterrupted) {
  KeepGoingAfterLoss keep_going;
  JobResult failed;
  failed.exit_code = 137;
  failed.exits = {Exit(0, false, 1), Exit(1, true, 9)};
  keep_going.Judge(failed);
  EXPECT_EQ(failed.exit_code, 137);
  JobResult interrupted;
  interrupted.exit_code = 130;
  interrupted.interrupted = true;
  interrupted.exits = {Exit(0, false, 0), Exit(1, true, 2)};
  keep_going.Judge(interrupted);
  EXPECT_EQ(interrupted.exit_code, 130);
}

TEST(KeepGoingAfterLoss, LaunchAttachesItOnlyWhenTheProgramAsksForMinReplicas) {
  EXPECT_TRUE(ProgramAsksToKeepGoing({"ddp_mlp", "--min_replicas=2"}));
  EXPECT_TRUE(ProgramAsksToKeepGoing({"ddp_mlp", "--epochs=1", "--min_replicas", "3"}));
  EXPECT_FALSE(ProgramAsksToKeepGoing({"ddp_mlp", "--min_replicas=0"}));
  EXPECT_FALSE(ProgramAsksToKeepGoing({"ddp_mlp", "--max_restarts=2"}));
  EXPECT_FALSE(ProgramAsksToKeepGoing({"--min_replicas=2"}));  // that is the program's name, not a flag
}

}  // namespace
}  // namespace tinyddp::dist::in_place
