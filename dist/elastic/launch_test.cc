// The launch binary as users run it and hurt it, end to end with real processes: however the launcher ends,
// nothing it started keeps running (a wrapper's grandchild, one that left its process group, one left behind
// by a worker that succeeded); launchers with different settings both stop at once, naming the setting; a
// permanent failure is not restarted; a misspelled TINYDDP_ variable is named; a relative program path
// typed under `bazel run` is found; a bracketed IPv6 --master_addr ([::1]) works; the launcher and its workers
// agree on one timeout; a job that fails before its first collective says so; NCCL_DEBUG on Gloo ranks says
// it does nothing; every connection the store refused is counted, also when the job ends right after.
//
// Workers are shell commands and this binary in a role (--as_writer, --as_worker). LAUNCH_BINARY=PATH runs
// every test against another build of `launch` (an older one, to see a test fail without its fix).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/init.h"
#include "dist/worker/job_timeout.h"
#include "dist/store/internal/socket.h"
#include "dist/store/tcp_store.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using namespace std::chrono_literals;
namespace t = ::tinyddp::dist::testing;

// ---- Roles ------------------------------------------------------------------------------------------

// A program that keeps running and writing, as training does: its pid to DIR/writer.pid, then a line to
// DIR/out every 20 ms, for at most 60 s (so that a launcher without the fix cannot leave it for good).
// With "setsid" it first leaves the process group and session its worker was given, as daemons do.
int RunWriter(const std::string& dir, bool leave_group) {
  if (leave_group) ::setsid();
  t::WriteFile(dir + "/writer.pid", std::to_string(::getpid()));
  for (int i = 0; i < 3000; ++i) {
    std::ofstream(dir + "/out", std::ios::app) << "x\n";
    ::usleep(20000);
  }
  return 0;
}

// "timeout": the job's timeout as this worker resolves it (its own --timeout, else TINYDDP_TIMEOUT), into
// DIR/timeout. "gloo": joins a Gloo group and leaves.
int RunWorker(const std::string& mode, const std::string& dir, const std::string& flag) {
  if (mode == "timeout") {
    auto timeout = ResolveJobTimeout(flag.empty() ? "" : flag.substr(flag.find('=') + 1));
    t::WriteFile(dir + "/timeout", timeout.ok() ? FormatTimeout(*timeout) : "bad");
    return 0;
  }
  if (mode == "gloo") return InitProcessGroup({.backend = Backend::kGloo, .timeout = 30s}).ok() ? 0 : 1;
  return 99;
}

// ---- Helpers ----------------------------------------------------------------------------------------

std::string LaunchBinary() {
  if (const char* other = std::getenv("LAUNCH_BINARY")) return other;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/", workspace != nullptr ? workspace : "tinyddp",
                      "/dist/launch/launch");
}

struct Launched {
  pid_t pid = -1;
  std::string err;
  std::string Err() const { return t::ReadFile(err); }
};

// `launch ARGS` with `env` set, this environment's job variables removed; stderr into DIR/<tag>.err.
Launched Launch(const std::string& dir, const std::string& tag, const std::vector<std::string>& args,
                const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::vector<std::string> argv = {LaunchBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> unset = t::LauncherVariables();
  for (const char* v : {"TINYDDP_STORE_SECRET", "TINYDDP_TIMEOUT", "TINYDDP_FLIGHT_RECORDER_DIR", "NCCL_DEBUG",
                        "BUILD_WORKING_DIRECTORY"}) {
    unset.push_back(v);
  }
  Launched l{0, absl::StrCat(dir, "/", tag, ".err")};
  l.pid = t::StartProcess(argv, env, unset, "", l.err);
  return l;
}

int ExitCode(std::optional<int> status) {
  if (!status) return -1000;  // still running at the bound (and killed)
  if (WIFSIGNALED(*status)) return -WTERMSIG(*status);
  return WEXITSTATUS(*status);
}

// Whether `pid` has ended within `bound`: gone, or a zombie that nobody has reaped yet.
bool EndsWithin(pid_t pid, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z') return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

size_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

// A job whose worker command is a shell wrapper running the writer in the background: the writer is the
// launcher's grandchild. Returns once the writer runs.
struct WrappedJob {
  std::string dir;
  Launched launcher;
  pid_t writer = -1;
};

WrappedJob StartWrappedWriter(bool leave_group, const std::string& after = "wait") {
  WrappedJob job;
  job.dir = t::MakeTempDir();
  const std::string command =
      absl::StrCat("'", t::SelfPath(), "' --as_writer ", job.dir, leave_group ? " setsid" : "", " & ", after);
  job.launcher = Launch(job.dir, "launch", {"--nproc_per_node=1", "--grace_seconds=1", "/bin/sh", "-c", command});
  if (t::WaitForFile(job.dir + "/writer.pid", 30s))
    (void)absl::SimpleAtoi(t::ReadFile(job.dir + "/writer.pid"), &job.writer);
  return job;
}

// The writer must be gone within a few seconds of the launcher's end, and its file must stop growing.
void ExpectWriterStops(const WrappedJob& job, const std::string& how) {
  ASSERT_GT(job.writer, 0) << job.launcher.Err();
  const bool ended = EndsWithin(job.writer, 5s);
  EXPECT_TRUE(ended) << "the worker's child (pid " << job.writer << ") still runs 5 s after the launcher " << how
                     << "\n"
                     << job.launcher.Err();
  const size_t size = FileSize(job.dir + "/out");
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(FileSize(job.dir + "/out"), size) << "something still writes after the launcher " << how;
  if (!ended) ::kill(job.writer, SIGKILL);
}

int FreePort() {
  int port = 0;
  auto s = internal::Listen("", 0, &port);  // closed again on return: free unless someone races us to it
  return port;
}

// ---- Nothing outlives the launcher ------------------------------------------------------------------

TEST(LaunchLeavesNothingRunning, AWrappedProgramStopsWhenTheLauncherIsKilled) {
  WrappedJob job = StartWrappedWriter(/*leave_group=*/false);
  ASSERT_EQ(::kill(job.launcher.pid, SIGKILL), 0);
  EXPECT_EQ(ExitCode(t::WaitFor(job.launcher.pid, 30s)), -SIGKILL);
  ExpectWriterStops(job, "was killed (SIGKILL)");
}

TEST(LaunchLeavesNothingRunning, AWrappedProgramStopsWhenTheLaunchersTerminalGoesAway) {
  WrappedJob job = StartWrappedWriter(/*leave_group=*/false);
  ASSERT_EQ(::kill(job.launcher.pid, SIGHUP), 0);
  EXPECT_NE(ExitCode(t::WaitFor(job.launcher.pid, 30s)), 0);
  ExpectWriterStops(job, "got SIGHUP");
  EXPECT_TRUE(absl::StrContains(job.launcher.Err(), "interrupted by SIGHUP")) << job.launcher.Err();
}

TEST(LaunchLeavesNothingRunning, AProgramThatLeftItsProcessGroupStopsOnSigterm) {
  WrappedJob job = StartWrappedWriter(/*leave_group=*/true);
  ASSERT_EQ(::kill(job.launcher.pid, SIGTERM), 0);
  EXPECT_EQ(ExitCode(t::WaitFor(job.launcher.pid, 30s)), 128 + SIGTERM);
  ExpectWriterStops(job, "got SIGTERM");
  EXPECT_TRUE(absl::StrContains(job.launcher.Err(), "process(es) the workers left running")) << job.launcher.Err();
}

TEST(LaunchLeavesNothingRunning, AProgramThatLeftItsProcessGroupStopsWhenTheLauncherIsKilled) {
  WrappedJob job = StartWrappedWriter(/*leave_group=*/true);
  ASSERT_EQ(::kill(job.launcher.pid, SIGKILL), 0);
  EXPECT_EQ(ExitCode(t::WaitFor(job.launcher.pid, 30s)), -SIGKILL);
  ExpectWriterStops(job, "was killed (SIGKILL) while its worker's child ran in a session of its own");
}

TEST(LaunchLeavesNothingRunning, WhatASucceedingWorkerLeftRunningIsStopped) {
  WrappedJob job = StartWrappedWriter(/*leave_group=*/false, /*after=*/"sleep 0.5; exit 0");
  EXPECT_EQ(ExitCode(t::WaitFor(job.launcher.pid, 30s)), 0) << job.launcher.Err();
  ExpectWriterStops(job, "finished a job whose worker succeeded");
}

// ---- The launchers of a job agree on its settings ---------------------------------------------------

// Two launchers of one job, on loopback, that differ in `differ` (node 0, node 1): both must stop within
// the test's bound (the rendezvous timeout is 5 minutes) and name the setting with both values.
void ExpectBothRefuse(const std::vector<std::string>& node0, const std::vector<std::string>& node1,
                      const std::string& program, const std::string& named) {
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> args = {absl::StrCat("--node_rank=", node), "--master_port=" + port, "--nproc_per_node=1"};
    const std::vector<std::string>& differ = node == 0 ? node0 : node1;
    args.insert(args.end(), differ.begin(), differ.end());
    args.insert(args.end(), {"/bin/sh", "-c", program});
    nodes.push_back(Launch(dir, absl::StrCat("node", node), args, {{"TINYDDP_STORE_SECRET", "settings-test-secret"}}));
  }
  for (const Launched& n : nodes) {
    EXPECT_EQ(ExitCode(t::WaitFor(n.pid, 30s)), 2) << n.Err();
    EXPECT_TRUE(absl::StrContains(n.Err(), named)) << n.Err();
  }
}

TEST(LaunchSettings, LaunchersWithDifferentNnodesBothStopAndSayWhatDiffers) {
  ExpectBothRefuse({"--nnodes=2"}, {"--nnodes=3"}, "sleep 20",
                   "the launchers disagree on --nnodes: node 0 has 2, node 1 has 3");
}

TEST(LaunchSettings, LaunchersWithDifferentMaxRestartsBothStopAndSayWhatDiffers) {
  ExpectBothRefuse({"--nnodes=2", "--max_restarts=1"}, {"--nnodes=2", "--max_restarts=0"}, "exit 0",
                   "the launchers disagree on --max_restarts: node 0 has 1, node 1 has 0");
}

// ---- Permanent failures -----------------------------------------------------------------------------

TEST(LaunchRestarts, AWorkerThatExits73IsNotRestarted) {
  const std::string dir = t::MakeTempDir();
  Launched l = Launch(dir, "launch",
                      {"--nproc_per_node=1", "--max_restarts=2", "/bin/sh", "-c",
                       absl::StrCat("echo started >> ", dir, "/starts; exit 73")});
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 73) << l.Err();
  EXPECT_EQ(t::ReadFile(dir + "/starts"), "started\n") << "started more than once:\n" << l.Err();
  EXPECT_TRUE(absl::StrContains(l.Err(), "(not restarting: exit code 73 means a permanent error)")) << l.Err();
}

TEST(LaunchRestarts, APermanentFailureOnOneNodeStopsEveryNode) {
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  // Rank 1 (node 1) fails for good once rank 0 has started (so that both rounds' starts are counted, not a
  // race between rank 0's shell and node 1's news); rank 0 would run on. Neither node may start a second round.
  const std::string program = absl::StrCat(
      "echo started >> ", dir, "/starts.$RANK; if [ $RANK = 1 ]; then i=0; while [ ! -s ", dir,
      "/starts.0 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 73; fi; sleep 20");
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(Launch(dir, absl::StrCat("node", node),
                           {"--nnodes=2", absl::StrCat("--node_rank=", node), "--master_port=" + port,
                            "--nproc_per_node=1", "--max_restarts=2", "--grace_seconds=1", "/bin/sh", "-c", program},
                           {{"TINYDDP_STORE_SECRET", "permanent-test-secret"}}));
  }
  for (const Launched& n : nodes) {
    EXPECT_NE(ExitCode(t::WaitFor(n.pid, 60s)), 0) << n.Err();
    EXPECT_TRUE(absl::StrContains(n.Err(), "(not restarting: exit code 73 means a permanent error)")) << n.Err();
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(t::ReadFile(absl::StrCat(dir, "/starts.", rank)), "started\n") << "rank " << rank;
  }
}

// ---- What the user typed ----------------------------------------------------------------------------

TEST(LaunchEnvironment, AMisspelledTinyddpVariableIsNamedWithTheClosestOne) {
  const std::string dir = t::MakeTempDir();
  Launched l = Launch(dir, "launch", {"--nproc_per_node=1", "/bin/true"}, {{"TINYDDP_TIMOUT", "20s"}});
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 0) << l.Err();
  EXPECT_TRUE(absl::StrContains(l.Err(),
                                "launch: TINYDDP_TIMOUT is not a tinyddp variable; did you mean "
                                "TINYDDP_TIMEOUT?\n"))
      << l.Err();
}

TEST(LaunchEnvironment, ARelativeProgramPathIsFoundWhereBazelRunWasTyped) {
  // `bazel run //dist/launch -- bazel-bin/examples/x` runs the launcher in its runfiles folder; the path was
  // typed in BUILD_WORKING_DIRECTORY.
  const std::string typed_in = t::MakeTempDir();
  ASSERT_EQ(::mkdir((typed_in + "/bin").c_str(), 0755), 0);
  t::WriteFile(typed_in + "/bin/prog", absl::StrCat("#!/bin/sh\necho ran > ", typed_in, "/ran\n"));
  ASSERT_EQ(::chmod((typed_in + "/bin/prog").c_str(), 0755), 0);
  const std::string elsewhere = t::MakeTempDir();
  const pid_t pid =
      t::StartProcess({"/bin/sh", "-c",
                       absl::StrCat("cd '", elsewhere, "' && exec '", LaunchBinary(), "' --nproc_per_node=1 bin/prog")},
                      {{"BUILD_WORKING_DIRECTORY", typed_in}}, t::LauncherVariables(), "", elsewhere + "/err");
  EXPECT_EQ(ExitCode(t::WaitFor(pid, 60s)), 0) << t::ReadFile(elsewhere + "/err");
  EXPECT_EQ(t::ReadFile(typed_in + "/ran"), "ran\n") << t::ReadFile(elsewhere + "/err");
}

TEST(LaunchEnvironment, ABracketedIpv6MasterAddrIsTheAddressWithinTheBrackets) {
  // "[::1]" is how URLs, and so users, write an IPv6 address; the sockets want "::1".
  const std::string dir = t::MakeTempDir();
  const std::string port = std::to_string(FreePort());
  std::vector<Launched> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(Launch(dir, absl::StrCat("node", node),
                           {"--nnodes=2", absl::StrCat("--node_rank=", node), "--master_addr=[::1]",
                            "--master_port=" + port, "--nproc_per_node=1", "--rendezvous_timeout=20", "/bin/true"},
                           {{"TINYDDP_STORE_SECRET", "ipv6-test-secret-0123456789abcdef"}}));
  }
  for (const Launched& n : nodes) EXPECT_EQ(ExitCode(t::WaitFor(n.pid, 60s)), 0) << n.Err();
  EXPECT_TRUE(absl::StrContains(nodes[0].Err(), absl::StrCat("store at ::1:", port, " (listening on ::1)")))
      << "loopback only\n" << nodes[0].Err();
  EXPECT_FALSE(absl::StrContains(nodes[1].Err(), "could not resolve")) << nodes[1].Err();
}

TEST(LaunchEnvironment, TheLauncherAndItsWorkersAgreeOnOneTimeout) {
  // Given to the program only: the launcher waits as long, and its workers see it in TINYDDP_TIMEOUT.
  const std::string dir = t::MakeTempDir();
  Launched l = Launch(dir, "launch", {"--nproc_per_node=1", t::SelfPath(), "--as_worker=timeout", dir, "--timeout=7s"});
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 0) << l.Err();
  EXPECT_TRUE(absl::StrContains(l.Err(), "timeout 7s (the program's --timeout)")) << l.Err();
  EXPECT_EQ(t::ReadFile(dir + "/timeout"), "7s");
  // Given to both, differently: the worker says so.
  Launched both = Launch(
      dir, "both", {"--timeout=1m", "--nproc_per_node=1", t::SelfPath(), "--as_worker=timeout", dir, "--timeout=7s"});
  EXPECT_EQ(ExitCode(t::WaitFor(both.pid, 60s)), 0) << both.Err();
  EXPECT_TRUE(absl::StrContains(both.Err(), "--timeout=7s differs from TINYDDP_TIMEOUT=1m (the launcher's)"))
      << both.Err();
}

// ---- What a failed job says -------------------------------------------------------------------------

TEST(LaunchMessages, AJobThatFailsBeforeItsFirstCollectiveSaysNoneWasIssued) {
  const std::string dir = t::MakeTempDir();
  Launched l = Launch(dir, "launch", {"--nproc_per_node=1", "/bin/false"}, {{"TMPDIR", dir}});
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 1) << l.Err();
  EXPECT_FALSE(absl::StrContains(l.Err(), "cannot read")) << l.Err();
  EXPECT_TRUE(absl::StrContains(l.Err(), "launch: flight recorder: no collective was issued\n")) << l.Err();
}

TEST(LaunchMessages, NcclDebugOnGlooRanksSaysItHasNoEffectOnce) {
  const std::string dir = t::MakeTempDir();
  Launched l =
      Launch(dir, "launch", {"--nproc_per_node=2", t::SelfPath(), "--as_worker=gloo", dir}, {{"NCCL_DEBUG", "INFO"}});
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 0) << l.Err();
  const std::string err = l.Err();
  const std::string note = "NCCL_DEBUG has no effect on gloo (CPU) ranks";
  EXPECT_TRUE(absl::StrContains(err, note)) << err;
  EXPECT_EQ(err.find(note), err.rfind(note)) << "said once, not by every rank:\n" << err;
}

// How many refused store connections the launcher's stderr accounts for: one per line it logged, plus the
// counts those lines give of the others.
int RefusalsAccountedFor(const std::string& err) {
  int total = 0;
  for (absl::string_view view : absl::StrSplit(err, '\n')) {
    const std::string line(view);
    int more = 0;
    if (absl::StrContains(line, "refused a connection from")) {  // "... (and N more before it)" at its end
      const size_t at = line.rfind("(and ");
      total += 1 + (at != std::string::npos && std::sscanf(line.c_str() + at, "(and %d more", &more) == 1 ? more : 0);
    } else if (std::sscanf(line.c_str(), "store server (port %*d): refused %d more", &more) == 1) {
      total += more;
    }
  }
  return total;
}

TEST(LaunchMessages, EveryRefusedStoreConnectionIsCountedAlsoWhenTheJobEndsRightAfter) {
  // The store logs a refusal at most once per 10 s, with a count of the others; a job that ends within 10 s
  // of the first line must still give the count of the rest. The worker runs until the test lets it end.
  const std::string dir = t::MakeTempDir();
  Launched l = Launch(dir, "launch",
                      {"--nproc_per_node=1", "/bin/sh", "-c",
                       absl::StrCat("while [ ! -e '", dir, "/go' ]; do sleep 0.05; done")});
  ASSERT_TRUE(t::WaitForFile(l.err, 30s));
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {  // the launcher's first line names the store's port
    const std::string err = l.Err();
    const size_t at = err.find("store at 127.0.0.1:");
    if (at != std::string::npos) (void)absl::SimpleAtoi(err.substr(at + 19, err.find(' ', at + 19) - at - 19), &port);
    if (port == 0) std::this_thread::sleep_for(50ms);
  }
  ASSERT_GT(port, 0) << l.Err();
  for (int i = 0; i < 3; ++i) {  // someone without the job's secret
    auto stranger = TCPStore::Create({.host = "127.0.0.1", .port = port, .timeout = 10s, .secret = "not-the-secret"});
    EXPECT_FALSE(stranger.ok());
  }
  t::WriteFile(dir + "/go", "");
  EXPECT_EQ(ExitCode(t::WaitFor(l.pid, 60s)), 0) << l.Err();
  EXPECT_EQ(RefusalsAccountedFor(l.Err()), 3) << l.Err();
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--as_writer") == 0) {
    return tinyddp::dist::RunWriter(argv[2], argc >= 4 && std::strcmp(argv[3], "setsid") == 0);
  }
  if (argc >= 3 && std::strncmp(argv[1], "--as_worker=", 12) == 0) {
    return tinyddp::dist::RunWorker(argv[1] + 12, argv[2], argc >= 4 ? argv[3] : "");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
