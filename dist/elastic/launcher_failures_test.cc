// The launcher when things go wrong, end to end with real processes, real Gloo collectives and a real
// store: it blames the rank whose failure came first rather than the first exit it saw; after a hang it
// names the rank the others timed out waiting for; --max_restarts starts a fresh round whose workers
// rendezvous anew (over one node and over two); and a worker count the machine cannot hold is refused
// before anything is forked. This binary plays the launcher (--as_launcher ARGS, with the root-cause blame
// attached as the launch binary attaches it) and its workers (--as_worker=MODE DIR), which leave what they
// saw in files in DIR.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/init.h"
#include "dist/worker/env.h"
#include "dist/elastic/launch_flags.h"
#include "dist/elastic/launcher.h"
#include "dist/observe/blame/blame.h"
#include "dist/observe/blame/error_file.h"
#include "dist/store/internal/socket.h"
#include "dist/store/store_secret.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {
namespace {

using namespace std::chrono_literals;
namespace t = ::tinyddp::dist::testing;

// ---- Worker roles -------------------------------------------------------------------------------

volatile sig_atomic_t g_signal = 0;
void RecordSignal(int signo) { g_signal = signo; }

int Rank() {
  int rank = -1;
  const char* v = std::getenv("RANK");
  return v != nullptr && absl::SimpleAtoi(v, &rank) ? rank : -1;
}

// Joins the job's process group and sums rank+1 over it: every rank must see 1+2+...+world.
absl::Status SumOfRanks(ProcessGroup& pg) {
  Tensor x = Tensor::FromVector<float>({static_cast<float>(pg.rank() + 1)}, {1});
  RETURN_IF_ERROR(pg.AllReduce(x, ReduceOp::kSum)->Wait());
  const int n = pg.size();
  if (x.ToVector<float>()[0] != static_cast<float>(n * (n + 1) / 2)) {
    return absl::InternalError(absl::StrCat("rank ", pg.rank(), " summed ", x.ToVector<float>()[0]));
  }
  return absl::OkStatus();
}

// Exits like a training program does: records why in the launcher's error file, then exits 1.
int Fail(const absl::Status& status) {
  RecordWorkerFailure(Rank(), status);
  std::fprintf(stderr, "worker rank %d: %s\n", Rank(), std::string(status.message()).c_str());
  return 1;
}

int RunWorker(const std::string& mode, const std::string& dir) {
  const int rank = Rank();
  const std::string me = absl::StrCat(dir, "/", rank);
  if (mode == "blame") {
    // Rank 1 fails on its own and records it, but exits only after rank 0, which fails because of it,
    // has exited and been reaped: the launcher sees rank 0 go first.
    if (rank == 1) {
      ::signal(SIGTERM, RecordSignal);  // outlive the launcher's SIGTERM so as to exit with our own code
      RecordWorkerFailure(1, absl::InternalError("disk full while writing shard 7"));
      t::WriteFile(me + ".recorded", "");
      if (!t::WaitForFile(dir + "/0.pid", 30s)) return 90;
      int pid0 = 0;
      (void)absl::SimpleAtoi(t::ReadFile(dir + "/0.pid"), &pid0);
      for (int i = 0; i < 3000 && !t::ProcessGone(pid0); ++i) ::usleep(10000);  // gone = exited and reaped
      return 3;
    }
    if (!t::WaitForFile(dir + "/1.recorded", 30s)) return 91;
    t::WriteFile(me + ".pid", std::to_string(::getpid()));
    return Fail(absl::UnavailableError("AllReduce failed: connection closed by peer (rank 1)"));
  }
  if (mode == "hang") {
    // A real collective works; then rank 1 stops responding while the others wait in the next one.
    auto pg = InitProcessGroup({.backend = Backend::kGloo});
    if (!pg.ok()) return Fail(pg.status());
    t::WriteFile(me + ".timeout", absl::StrCat((*pg)->timeout().count()));
    if (absl::Status s = SumOfRanks(**pg); !s.ok()) return Fail(s);
    if (rank == 1) {
      ::signal(SIGTERM, RecordSignal);
      for (int i = 0; i < 6000 && g_signal == 0; ++i) ::usleep(10000);  // "hung" (bounded: 60 s)
      t::WriteFile(me + ".got", std::to_string(g_signal));
      return 0;
    }
    absl::Status s = SumOfRanks(**pg);
    return s.ok() ? 0 : Fail(s);
  }
  if (mode == "restart" || mode == "restart_never") {
    // Round 0 (and every round with restart_never): rank 1 exits 5 after a first collective. A later
    // round rendezvouses again in the same store and must sum correctly.
    const int round = ReadWorkerEnv().value_or(WorkerEnv{}).restart_count;
    // In a later round rank 0 comes late, so the others look for its address in the store before it has
    // published the new one: they must not find round 0's (InitProcessGroup keeps the rounds apart).
    if (round > 0 && rank == 0) ::usleep(500000);
    auto pg = InitProcessGroup({.backend = Backend::kGloo, .timeout = 30s});
    if (!pg.ok()) return Fail(pg.status());
    if (absl::Status s = SumOfRanks(**pg); !s.ok()) return Fail(s);
    if (rank == 1 && (round == 0 || mode == "restart_never")) {
      RecordWorkerFailure(1, absl::InternalError(absl::StrCat("round ", round, " fails on purpose")));
      return 5;
    }
    if (absl::Status s = SumOfRanks(**pg); !s.ok()) return Fail(s);
    t::WriteFile(absl::StrCat(me, ".round", round), "ok");
    return 0;
  }
  return 99;
}

// ---- The tests ------------------------------------------------------------------------------------

struct Launched {
  pid_t pid;
  std::string out, err;
};

Launched StartLauncher(const std::string& dir, const std::string& tag, const std::vector<std::string>& launch_args,
                       const std::string& mode, const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::vector<std::string> argv = {t::SelfPath(), "--as_launcher"};
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  argv.insert(argv.end(), {t::SelfPath(), "--as_worker=" + mode, dir});
  Launched l{0, dir + "/" + tag + ".out", dir + "/" + tag + ".err"};
  std::vector<std::string> unset = t::LauncherVariables();
  for (const char* v : {kStoreSecretEnv, "TINYDDP_TIMEOUT", "TINYDDP_FAULT", kRestartCountEnv, kErrorFileEnv}) {
    unset.push_back(v);
  }
  l.pid = t::StartProcess(argv, env, unset, l.out, l.err);
  return l;
}

int ExitCode(std::optional<int> status) {
  if (!status) return -1000;  // did not finish in time (and was killed)
  if (WIFSIGNALED(*status)) return -WTERMSIG(*status);
  return WEXITSTATUS(*status);
}

TEST(LauncherFailures, BlamesTheRankWhoseFailureCameFirstNotTheFirstToExit) {
  const std::string dir = t::MakeTempDir();
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=2", "--grace_seconds=30"}, "blame");
  const int code = ExitCode(t::WaitFor(l.pid, 60s));
  const std::string err = t::ReadFile(l.err);
  EXPECT_EQ(code, 3) << "the job exits with the root cause's code, not rank 0's 1\n" << err;
  // Rank 0 exited (and was reaped) first ...
  EXPECT_NE(err.find("launch: rank 0 (local rank 0, pid"), std::string::npos) << err;
  // ... but rank 1's failure came first and is the one named, with its own words.
  EXPECT_NE(err.find("job failed: rank 1 (local rank 1, pid"), std::string::npos) << err;
  EXPECT_NE(err.find("failed first: exit code 3 (error: disk full while writing shard 7)"), std::string::npos) << err;
}

TEST(LauncherFailures, AfterAHangTheOthersTimeOutAndTheHungRankIsTheSuspect) {
  const std::string dir = t::MakeTempDir();
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=3", "--timeout=3s"}, "hang");
  const int code = ExitCode(t::WaitFor(l.pid, 120s));
  const std::string err = t::ReadFile(l.err);
  EXPECT_EQ(code, 1) << err;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/", r, ".timeout")), "3000")
        << "launch --timeout reaches every rank's process group through TINYDDP_TIMEOUT";
  }
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
  EXPECT_NE(err.find("failed first: exit code 1 (timeout: "), std::string::npos) << err;
  EXPECT_NE(err.find("; suspect rank 1 (still running when the others gave up: hung or stuck?)"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("suspect rank 0"), std::string::npos) << err;
  EXPECT_EQ(err.find("suspect rank 2"), std::string::npos) << err;
  EXPECT_EQ(t::ReadFile(dir + "/1.got"), std::to_string(SIGTERM)) << "the hung rank is stopped, not left behind";
}

TEST(LauncherFailures, MaxRestartsStartsAFreshRoundThatRendezvousesAnew) {
  const std::string dir = t::MakeTempDir();
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=3", "--max_restarts=1", "--grace_seconds=2"}, "restart");
  const int code = ExitCode(t::WaitFor(l.pid, 120s));
  const std::string err = t::ReadFile(l.err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(err.find("round 0 failed: rank 1 (local rank 1, pid"), std::string::npos) << err;
  EXPECT_NE(err.find("restarting all workers (restart 1 of 1, TINYDDP_RESTART_COUNT=1)"), std::string::npos) << err;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/", r, ".round1")), "ok") << "rank " << r << " did not finish round 1";
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/", r, ".round0")), "") << "round 0 failed: nobody finished it";
  }
}

TEST(LauncherFailures, WhenRestartsRunOutTheJobFailsWithTheLastRoundsCause) {
  const std::string dir = t::MakeTempDir();
  Launched l =
      StartLauncher(dir, "launch", {"--nproc_per_node=2", "--max_restarts=2", "--grace_seconds=2"}, "restart_never");
  const int code = ExitCode(t::WaitFor(l.pid, 120s));
  const std::string err = t::ReadFile(l.err);
  EXPECT_EQ(code, 5) << err;
  EXPECT_NE(err.find("restart 2 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("failed first: exit code 5 (error: round 2 fails on purpose) (no restarts left: "
                     "--max_restarts=2); exiting with 5"),
            std::string::npos)
      << err;
}

int FreePort() {
  int port = 0;
  auto s = internal::Listen("", 0, &port);  // closed again on return: free unless someone races us to it
  return port;
}

TEST(LauncherFailures, TwoNodesRestartTogetherAfterAFailureOnOne) {
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(StartLauncher(dir, absl::StrCat("node", node),
                                  {"--nnodes=2", absl::StrCat("--node_rank=", node), "--master_port=" + port,
                                   "--nproc_per_node=2", "--max_restarts=1", "--grace_seconds=2", "--timeout=60s"},
                                  "restart", {{kStoreSecretEnv, "two-node-test-secret-5b8e1d"}}));
  }
  for (auto& n : nodes) EXPECT_EQ(ExitCode(t::WaitFor(n.pid, 120s)), 0) << t::ReadFile(n.err);
  // Rank 1 (node 0) failed round 0; node 1's workers failed because of it, and both launchers name
  // rank 1 as the cause before restarting together.
  for (auto& n : nodes) {
    const std::string err = t::ReadFile(n.err);
    EXPECT_NE(err.find("round 0 failed: node 0: rank 1 (local rank 1, pid"), std::string::npos) << err;
    EXPECT_NE(err.find("failed first: exit code 5 (error: round 0 fails on purpose); restarting all workers"),
              std::string::npos)
        << err;
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/", r, ".round1")), "ok") << "rank " << r;
  }
}

TEST(LauncherFailures, MoreWorkersThanTheMachineHoldsAreRefusedBeforeAnyIsStarted) {
  const std::string dir = t::MakeTempDir();
  const std::string err = dir + "/err";
  const pid_t pid = t::StartProcess({t::SelfPath(), "--as_launcher", "--nproc_per_node=100000", "/bin/true"}, {},
                                    t::LauncherVariables(), "", err);
  EXPECT_EQ(ExitCode(t::WaitFor(pid, 60s)), 2) << t::ReadFile(err);
  EXPECT_NE(t::ReadFile(err).find("launch: --nproc_per_node=100000: 100000 workers do not fit on this machine"),
            std::string::npos)
      << t::ReadFile(err);
  EXPECT_NE(t::ReadFile(err).find("or pass --ignore_worker_limits"), std::string::npos);
  EXPECT_EQ(t::ReadFile(err).find("starting"), std::string::npos) << "nothing may be started";
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--as_launcher") == 0) {
    auto options = tinyddp::dist::ParseLaunchArgs(std::vector<std::string>(argv + 2, argv + argc));
    if (!options.ok()) {
      std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
      return 2;
    }
    tinyddp::dist::Blame blame("launch");  // dist/observe/blame: what launch.cc attaches
    return tinyddp::dist::RunLauncher(*options, {&blame});
  }
  if (argc >= 3 && std::strncmp(argv[1], "--as_worker=", 12) == 0) {
    return tinyddp::dist::RunWorker(argv[1] + 12, argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
