// The TINYDDP_FAULT grammar, which process a spec names, and what each action does to a real (forked)
// process: exit with the given status, die by SIGKILL, hang until signalled, or hand NaN to the caller.
#include "base/fault_injection.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tinyddp {
namespace {

TEST(FaultSpec, ParsesEveryKeyAndDefaultsPointAndRestart) {
  auto spec = ParseFaultSpec("rank=1,step=5,action=hang");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rank, 1);
  EXPECT_EQ(spec->step, 5);
  EXPECT_EQ(spec->action, FaultAction::kHang);
  EXPECT_EQ(spec->point, "step");
  EXPECT_EQ(spec->restart, 0) << "by default a fault fires in the first round only";

  spec = ParseFaultSpec(" rank=* , step=17, point=allreduce, action=exit, code=7, restart=* ");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->rank.has_value());
  EXPECT_EQ(spec->point, "allreduce");
  EXPECT_EQ(spec->action, FaultAction::kExit);
  EXPECT_EQ(spec->exit_code, 7);
  EXPECT_FALSE(spec->restart.has_value());
}

TEST(FaultSpec, RefusesMistakesNamingTheKeyAndShowingAnExample) {
  const std::pair<const char*, const char*> cases[] = {
      {"rank=1,step=5", "missing action="},
      {"step=5,action=hang", "missing rank="},
      {"rank=1,step=5,action=explode", "action=explode is not one of hang, exit, kill, nan"},
      {"rank=one,step=5,action=hang", "rank=one is not a rank or *"},
      {"rank=1,step=-2,action=hang", "step=-2 is not a step number"},
      {"rank=1,step=5,action=exit,code=300", "code=300 must be an exit status in [1, 255]"},
      {"rank=1,step=5,action=hang,code=3", "code= only applies to action=exit"},
      {"rank=1,step=5,action=hang,ms=30", "ms= only applies to action=sleep"},
      {"rank=1,step=5,action=sleep,ms=-1", "ms=-1 must be milliseconds"},
      {"rank=1,step=5,action=hang,rank=2", "\"rank\" is given twice"},
      {"rank=1,step=5,action=hang,stpe=3", "unknown key \"stpe\""},
  };
  for (const auto& [text, why] : cases) {
    auto spec = ParseFaultSpec(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
    const std::string message(spec.status().message());
    EXPECT_NE(message.find(why), std::string::npos) << text << " -> " << message;
    EXPECT_NE(message.find("TINYDDP_FAULT=rank=1,step=5,action=hang"), std::string::npos) << message;
  }
}

TEST(FaultInjector, MatchesOnlyItsRankPointStepAndRound) {
  const FaultSpec spec = *ParseFaultSpec("rank=2,step=9,point=step,action=nan");
  const FaultInjector rank2(spec, /*rank=*/2, /*restart=*/0);
  EXPECT_TRUE(rank2.Matches("step", 9));
  EXPECT_FALSE(rank2.Matches("step", 8));
  EXPECT_FALSE(rank2.Matches("step", 10));
  EXPECT_FALSE(rank2.Matches("allreduce", 9));
  EXPECT_FALSE(FaultInjector(spec, 1, 0).Matches("step", 9)) << "another rank";
  EXPECT_FALSE(FaultInjector(spec, 2, 1).Matches("step", 9)) << "a restarted round runs clean by default";
  EXPECT_TRUE(FaultInjector(*ParseFaultSpec("rank=*,step=9,action=nan,restart=*"), 5, 3).Matches("step", 9));
  EXPECT_FALSE(FaultInjector().Matches("step", 0)) << "no spec, no fault";
  EXPECT_EQ(rank2.Maybe("step", 9), FaultAction::kNonFinite) << "nan is the caller's to carry out";
  EXPECT_EQ(rank2.Maybe("step", 10), FaultAction::kNone);
}

// Forks a child that runs `spec` at step 4 as rank 0 and returns its wait status. The child reports on
// `ready` (one byte) right before it reaches the fault, for the hang case.
int RunInChild(const std::string& spec, bool signal_it_after_ready = false) {
  int ready[2];
  EXPECT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    const FaultInjector injector(*ParseFaultSpec(spec), 0, 0);
    (void)!::write(ready[1], "r", 1);
    injector.Maybe("step", 4);
    ::_exit(0);  // not reached for hang, exit and kill
  }
  ::close(ready[1]);
  char byte = 0;
  EXPECT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  if (signal_it_after_ready) {
    int status = 0;
    // Still there: a hung process does not exit on its own (it may not have reached pause() yet, so
    // this can only err towards passing).
    EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0);
    ::kill(pid, SIGTERM);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST(FaultInjector, ExitEndsTheProcessWithTheGivenStatus) {
  const int status = RunInChild("rank=0,step=4,action=exit,code=7");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(FaultInjector, KillEndsTheProcessWithSigkill) {
  const int status = RunInChild("rank=0,step=4,action=kill");
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(FaultInjector, HangKeepsTheProcessUntilASignalEndsIt) {
  const int status = RunInChild("rank=0,step=4,action=hang", /*signal_it_after_ready=*/true);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(FaultInjector, StopFreezesTheProcessUntilItIsContinued) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const FaultInjector injector(*ParseFaultSpec("rank=0,step=4,action=stop"), 0, 0);
    injector.Maybe("step", 4);  // stopped here; carries on when continued
    ::_exit(9);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status)) << status;
  EXPECT_EQ(WSTOPSIG(status), SIGSTOP);
  ::kill(pid, SIGCONT);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 9);
}

TEST(FaultInjector, SleepPausesTheRankForItsMillisecondsAndCarriesOn) {
  const FaultSpec spec = *ParseFaultSpec("rank=0,step=4,action=sleep,ms=250");
  EXPECT_EQ(spec.sleep_ms, 250);
  const FaultInjector injector(spec, 0, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(injector.Maybe("step", 4), FaultAction::kNone);  // the caller has nothing left to do
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  EXPECT_EQ(injector.Maybe("step", 5), FaultAction::kNone);
}

TEST(FaultInjection, SeveralFaultsSeparatedBySemicolonsAreCheckedEachAtStartup) {
  ::setenv(kFaultEnv, "rank=3,step=5,action=kill;rank=2,point=recovery,step=1,action=kill", 1);
  EXPECT_TRUE(CheckFaultInjectionEnvironment().ok());
  ::setenv(kFaultEnv, "rank=3,step=5,action=kill;rank=2,step=1,action=explode", 1);
  const absl::Status bad = CheckFaultInjectionEnvironment();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("explode"), absl::string_view::npos) << bad;
  ::unsetenv(kFaultEnv);
}

}  // namespace
}  // namespace tinyddp
