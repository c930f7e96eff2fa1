// The launcher end to end with real processes. This binary plays every role: the test itself, the
// launcher (--as_launcher ARGS: runs RunLauncher like the `launch` tool) and its workers
// (--as_worker=MODE DIR), which report what they saw through files in DIR.
#include "dist/elastic/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/worker/env.h"
#include "dist/store/internal/socket.h"
#include "dist/elastic/launch_flags.h"
#include "dist/testing/process_test_util.h"
#include "dist/init.h"  // ConnectToJobStore
#include "dist/store/store_barrier.h"
#include "dist/store/store_secret.h"
#include "dist/store/tcp_store.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using namespace std::chrono_literals;
namespace t = ::tinyddp::dist::testing;

// ---- Worker roles -------------------------------------------------------------------------------

int Env(const char* name) {
  int v = -1;
  const char* text = std::getenv(name);
  return text && absl::SimpleAtoi(text, &v) ? v : -1;
}

std::string EnvText(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

volatile sig_atomic_t g_signal = 0;
void RecordSignal(int signo) { g_signal = signo; }

// Sleeps until a signal arrives or 60 s pass (bounded, so a broken launcher cannot leave it forever).
void IdleUntilSignalled() {
  for (int i = 0; i < 6000 && g_signal == 0; ++i) ::usleep(10000);
}

int RunWorker(const std::string& mode, const std::string& dir) {
  const int rank = Env("RANK");
  const std::string me = absl::StrCat(dir, "/", rank);
  if (mode == "env") {
    t::WriteFile(me + ".env", absl::StrCat(EnvText("RANK"), " ", EnvText("LOCAL_RANK"), " ", EnvText("WORLD_SIZE"), " ",
                                           EnvText("LOCAL_WORLD_SIZE"), " ", EnvText("GROUP_RANK"), " ",
                                           EnvText("MASTER_ADDR"), " ", EnvText("OMP_NUM_THREADS"), " ",
                                           EnvText(kLauncherStoreEnv), " ", EnvText("MASTER_PORT")));
    std::printf("hello from rank %d\nsecond line %d\n", rank, rank * 11);
    std::fprintf(stderr, "partial line without newline");
    return 0;
  }
  if (absl::StartsWith(mode, "fail:")) {
    // Every rank records its pid; the failing rank waits until all have, so the test can check them all.
    int failing = 0, world = Env("WORLD_SIZE");
    (void)absl::SimpleAtoi(mode.substr(5), &failing);
    ::signal(SIGTERM, RecordSignal);
    t::WriteFile(me + ".pid", std::to_string(::getpid()));
    if (rank == failing) {
      for (int r = 0; r < world; ++r) {
        if (!t::WaitForFile(absl::StrCat(dir, "/", r, ".pid"), 30s)) return 90;
      }
      return 3;
    }
    IdleUntilSignalled();
    if (rank == 0) {
      // Rank 0 ignores the SIGTERM: only the SIGKILL after the grace period can end it.
      g_signal = 0;
      IdleUntilSignalled();
    }
    return g_signal != 0 ? 0 : 91;
  }
  if (mode == "signal") {
    ::signal(SIGINT, RecordSignal);
    ::signal(SIGTERM, RecordSignal);
    t::WriteFile(me + ".ready", "");
    IdleUntilSignalled();
    t::WriteFile(me + ".got", std::to_string(g_signal));
    return 0;
  }
  if (mode == "meet") {
    auto env = ReadWorkerEnv();
    if (!env.ok()) return 80;
    auto store = ConnectToJobStore(*env, 30s);
    if (!store.ok()) return 81;
    if (!(*store)->Set(absl::StrCat("meet/", env->rank), absl::StrCat(::getpid())).ok()) return 82;
    if (!StoreBarrier(**store, "meet/barrier", env->world_size, 30s).ok()) return 83;
    std::string seen;
    for (int r = 0; r < env->world_size; ++r) {
      if ((*store)->GetString(absl::StrCat("meet/", r)).ok()) absl::StrAppend(&seen, r, ",");
    }
    // Everyone must be done with the store before anyone exits (the launcher on node 0 hosts it).
    if (!StoreBarrier(**store, "meet/done", env->world_size, 30s).ok()) return 84;
    t::WriteFile(me + ".meet", absl::StrCat(env->rank, " ", env->world_size, " ", env->local_rank, " ",
                                            env->group_rank, " ", seen));
    return 0;
  }
  if (mode == "secret") {
    // Joins with the secret the launcher gave it, then tries the same store without one.
    auto env = ReadWorkerEnv();
    if (!env.ok()) return 80;
    auto with = ConnectToJobStore(*env, 30s);
    if (!with.ok()) return 81;
    auto without = TCPStore::Create({.host = env->master_addr, .port = env->master_port, .timeout = 5s});
    t::WriteFile(me + ".secret", absl::StrCat(EnvText(kStoreSecretEnv), " ",
                                              without.ok() ? "accepted" : absl::StatusCodeToString(without.status().code())));
    return StoreBarrier(**with, "secret/done", env->world_size, 30s).ok() ? 0 : 84;
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
  unset.push_back(kStoreSecretEnv);  // unless the test sets it: a developer's own must not leak in
  l.pid = t::StartProcess(argv, env, unset, l.out, l.err);
  return l;
}

int ExitCode(std::optional<int> status) {
  if (!status) return -1000;  // did not finish in time (and was killed)
  if (WIFSIGNALED(*status)) return -WTERMSIG(*status);
  return WEXITSTATUS(*status);
}

TEST(Launcher, GivesEveryWorkerItsEnvVariablesAndPrefixesTheirOutput) {
  const std::string dir = t::MakeTempDir();
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=2", "--prefix_output"}, "env");
  ASSERT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 0) << t::ReadFile(l.err);
  std::string port;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> v = absl::StrSplit(t::ReadFile(absl::StrCat(dir, "/", r, ".env")), ' ');
    ASSERT_EQ(v.size(), 9u);
    EXPECT_EQ(v[0], std::to_string(r)) << "RANK";
    EXPECT_EQ(v[1], std::to_string(r)) << "LOCAL_RANK";
    EXPECT_EQ(v[2], "2") << "WORLD_SIZE";
    EXPECT_EQ(v[3], "2") << "LOCAL_WORLD_SIZE";
    EXPECT_EQ(v[4], "0") << "GROUP_RANK";
    EXPECT_EQ(v[5], "127.0.0.1") << "MASTER_ADDR";
    EXPECT_EQ(v[6], "1") << "OMP_NUM_THREADS: two workers share this machine";
    EXPECT_EQ(v[7], "1") << "the launcher hosts the store";
    int p = 0;
    EXPECT_TRUE(absl::SimpleAtoi(v[8], &p) && p > 0) << "MASTER_PORT " << v[8];
    if (r == 1) {
      EXPECT_EQ(v[8], port) << "both ranks must get the same MASTER_PORT";
    }
    port = v[8];
  }
  const std::string out = t::ReadFile(l.out), err = t::ReadFile(l.err);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(out.find(absl::StrCat("[rank ", r, "] hello from rank ", r, "\n")), std::string::npos) << out;
    EXPECT_NE(out.find(absl::StrCat("[rank ", r, "] second line ", r * 11, "\n")), std::string::npos) << out;
    EXPECT_NE(err.find(absl::StrCat("[rank ", r, "] partial line without newline\n")), std::string::npos) << err;
  }
}

TEST(Launcher, OneFailingWorkerStopsTheJobAndIsNamedWithItsExitCode) {
  const std::string dir = t::MakeTempDir();
  // Rank 0 ignores the first SIGTERM, so this also exercises the SIGKILL after the grace period.
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=3", "--grace_seconds=1"}, "fail:1");
  const int code = ExitCode(t::WaitFor(l.pid, 60s));
  const std::string err = t::ReadFile(l.err);
  EXPECT_EQ(code, 3) << "the launcher exits with the failing rank's code\n" << err;
  EXPECT_NE(err.find("rank 1 (local rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("failed first: exit code 3"), std::string::npos) << err;
  for (int r = 0; r < 3; ++r) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(t::ReadFile(absl::StrCat(dir, "/", r, ".pid")), &pid)) << "rank " << r;
    EXPECT_TRUE(t::ProcessGone(pid)) << "rank " << r << " (pid " << pid << ") is still running";
  }
}

TEST(Launcher, ForwardsSigintToEveryWorker) {
  const std::string dir = t::MakeTempDir();
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=2"}, "signal");
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(t::WaitForFile(absl::StrCat(dir, "/", r, ".ready"), 30s)) << t::ReadFile(l.err);
  ASSERT_EQ(::kill(l.pid, SIGINT), 0);
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 128 + SIGINT) << t::ReadFile(l.err);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/", r, ".got")), std::to_string(SIGINT)) << "rank " << r;
  }
  EXPECT_NE(t::ReadFile(l.err).find("interrupted by SIGINT"), std::string::npos) << t::ReadFile(l.err);
}

int FreePort() {
  int port = 0;
  auto s = internal::Listen("", 0, &port);  // closed again on return: free unless someone races us to it
  return port;
}

TEST(Launcher, TwoLaunchersWithTwoNodesFormOneJobOverLoopback) {
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(StartLauncher(dir, absl::StrCat("node", node),
                                  {"--nnodes=2", absl::StrCat("--node_rank=", node), "--master_addr=127.0.0.1",
                                   "--master_port=" + port, "--nproc_per_node=2", "--rendezvous_timeout=30"},
                                  "meet", {{kStoreSecretEnv, "two-node-test-secret-5b8e1d"}}));
  }
  for (auto& n : nodes) EXPECT_EQ(ExitCode(t::WaitFor(n.pid, 60s)), 0) << t::ReadFile(n.err);
  std::set<int> ranks;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> v = absl::StrSplit(t::ReadFile(absl::StrCat(dir, "/", r, ".meet")), ' ');
    ASSERT_EQ(v.size(), 5u) << "rank " << r << " did not report";
    ranks.insert(std::stoi(v[0]));
    EXPECT_EQ(v[1], "4") << "world size";
    EXPECT_EQ(v[2], std::to_string(r % 2)) << "local rank of global rank " << r;
    EXPECT_EQ(v[3], std::to_string(r / 2)) << "node of global rank " << r;
    EXPECT_EQ(v[4], "0,1,2,3,") << "rank " << r << " must see every rank in the store";
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
}

TEST(Launcher, AOneNodeJobsStoreAdmitsOnlyClientsWithTheSecretItGaveItsWorkers) {
  const std::string dir = t::MakeTempDir();
  Launched l = StartLauncher(dir, "launch", {"--nproc_per_node=2"}, "secret");
  ASSERT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 0) << t::ReadFile(l.err);
  std::vector<std::string> secrets;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> v = absl::StrSplit(t::ReadFile(absl::StrCat(dir, "/", r, ".secret")), ' ');
    ASSERT_EQ(v.size(), 2u) << "rank " << r;
    EXPECT_EQ(v[0].size(), 64u) << "a fresh 32-byte secret in hex, not " << v[0];
    EXPECT_EQ(v[1], "UNAUTHENTICATED") << "a client without the secret must be refused";
    secrets.push_back(v[0]);
  }
  EXPECT_EQ(secrets[0], secrets[1]) << "both workers must get the job's one secret";
  EXPECT_EQ(t::ReadFile(l.err).find("is not set"), std::string::npos) << "no warning when the launcher made one";
}

TEST(Launcher, TwoNodesUseTheSecretFromTheEnvironment) {
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  const std::string secret = "two-node-secret-7f3e";
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(StartLauncher(dir, absl::StrCat("node", node),
                                  {"--nnodes=2", absl::StrCat("--node_rank=", node), "--master_addr=127.0.0.1",
                                   "--master_port=" + port, "--nproc_per_node=1", "--rendezvous_timeout=30"},
                                  "secret", {{kStoreSecretEnv, secret}}));
  }
  for (auto& n : nodes) EXPECT_EQ(ExitCode(t::WaitFor(n.pid, 60s)), 0) << t::ReadFile(n.err);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/", r, ".secret")), secret + " UNAUTHENTICATED") << "rank " << r;
  }
}

TEST(Launcher, AFailureOnOneNodeStopsTheOtherNode) {
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(StartLauncher(dir, absl::StrCat("node", node),
                                  {"--nnodes=2", absl::StrCat("--node_rank=", node), "--master_port=" + port,
                                   "--nproc_per_node=2", "--grace_seconds=1", "--rendezvous_timeout=30"},
                                  "fail:3", {{kStoreSecretEnv, "two-node-test-secret-5b8e1d"}}));
  }
  EXPECT_EQ(ExitCode(t::WaitFor(nodes[1].pid, 60s)), 3) << t::ReadFile(nodes[1].err);
  EXPECT_NE(ExitCode(t::WaitFor(nodes[0].pid, 60s)), 0) << t::ReadFile(nodes[0].err);
  EXPECT_NE(t::ReadFile(nodes[0].err).find("another node failed: node 1: rank 3"), std::string::npos)
      << t::ReadFile(nodes[0].err);
  for (int r = 0; r < 4; ++r) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(t::ReadFile(absl::StrCat(dir, "/", r, ".pid")), &pid));
    EXPECT_TRUE(t::ProcessGone(pid)) << "rank " << r << " is still running";
  }
}

TEST(Launcher, ReportsAProgramThatCannotBeStarted) {
  const std::string dir = t::MakeTempDir();
  const std::string err = dir + "/err";
  pid_t pid = t::StartProcess({t::SelfPath(), "--as_launcher", "--nproc_per_node=2", dir + "/no_such_program"}, {},
                              t::LauncherVariables(), "", err);
  EXPECT_NE(ExitCode(t::WaitFor(pid, 60s)), 0);
  EXPECT_NE(t::ReadFile(err).find("could not start rank 0: " + dir + "/no_such_program: No such file"),
            std::string::npos)
      << t::ReadFile(err);
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
    return tinyddp::dist::RunLauncher(*options);
  }
  if (argc >= 3 && std::strncmp(argv[1], "--as_worker=", 12) == 0) {
    return tinyddp::dist::RunWorker(argv[1] + 12, argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
