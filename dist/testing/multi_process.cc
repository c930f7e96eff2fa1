// RunOnRanks: the parent spawns and supervises; the child connects to the store and runs the body.
#include "dist/testing/multi_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_server.h"
#include "gtest/gtest.h"

extern char** environ;

namespace tinyddp::dist::testing {

namespace {

// Which RunOnRanks call of the current test a child was started for.
constexpr char kCallEnv[] = "TINYDDP_TEST_RANKS_CALL";

std::string CurrentTestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info == nullptr ? "" : absl::StrCat(info->test_suite_name(), ".", info->name());
}

// Counts RunOnRanks calls within the current test (the parent runs many tests in one process).
int NextCallIndex() {
  static std::string test;
  static int index = 0;
  const std::string now = CurrentTestName();
  if (now != test) {
    test = now;
    index = 0;
  }
  return index++;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int out = fallback;
  if (v == nullptr || !absl::SimpleAtoi(v, &out)) return fallback;
  return out;
}

// The parent's environment minus what belongs to Bazel's view of the parent (its XML report, shards)
// or to an enclosing job, plus this rank's launcher variables.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& ours) {
  static const char* const kDrop[] = {"XML_OUTPUT_FILE", "GTEST_OUTPUT", "TEST_SHARD_INDEX", "TEST_TOTAL_SHARDS",
                                      "GTEST_SHARD_INDEX", "GTEST_TOTAL_SHARDS", "TEST_SHARD_STATUS_FILE",
                                      "TEST_PREMATURE_EXIT_FILE", "GTEST_FILTER"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool drop = ours.count(key) > 0;
    for (const char* d : kDrop) drop = drop || key == d;
    if (!drop) env.push_back(kv);
  }
  for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
  return env;
}

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, n);
}

std::string ReadTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "...\n" + s.substr(s.size() - max_bytes);
  return s;
}

void RunAsChild(int world_size, const std::function<void(const RankContext&)>& body) {
  RankContext ctx;
  ctx.rank = EnvInt("RANK", -1);
  ctx.world_size = EnvInt("WORLD_SIZE", -1);
  if (ctx.world_size != world_size || ctx.rank < 0) {
    std::fprintf(stderr, "rank process: RANK/WORLD_SIZE (%d/%d) do not match RunOnRanks(%d)\n", ctx.rank,
                 ctx.world_size, world_size);
    std::exit(3);
  }
  TCPStoreOptions options;
  options.host = "127.0.0.1";
  options.port = EnvInt("MASTER_PORT", 0);
  options.timeout = std::chrono::seconds(60);
  auto store = TCPStore::Create(options);
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: cannot reach the test's store: %s\n", ctx.rank,
                 std::string(store.status().message()).c_str());
    std::exit(4);
  }
  ctx.store = std::move(*store);
  body(ctx);
  ctx.store.reset();
  const bool failed = ::testing::Test::HasFailure();
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(failed ? 1 : 0);
}

}  // namespace

bool IsRankProcess() { return std::getenv(kCallEnv) != nullptr; }

void RunOnRanks(int world_size, const std::function<void(const RankContext&)>& body, RunOptions options) {
  const int call = NextCallIndex();
  if (IsRankProcess()) {
    if (EnvInt(kCallEnv, -1) == call) RunAsChild(world_size, body);
    return;  // another call's turn: this child skips it
  }

  auto server = TCPStoreServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string self = SelfPath();
  const std::string filter = "--gtest_filter=" + CurrentTestName();
  const char* tmp = std::getenv("TEST_TMPDIR");
  struct Child {
    pid_t pid = -1;
    std::string log;
    int status = 0;
    bool done = false;
    bool killed = false;
  };
  std::vector<Child> children(world_size);
  for (int r = 0; r < world_size; ++r) {
    Child& c = children[r];
    c.log = absl::StrCat(tmp ? tmp : "/tmp", "/rank", r, "_", getpid(), "_", call, ".log");
    std::vector<std::string> env = ChildEnvironment({
        {kCallEnv, std::to_string(call)},
        {"RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(world_size)},
        {"LOCAL_RANK", std::to_string(r)},
        {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
        {"GROUP_RANK", "0"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string((*server)->port())},
        {"TINYDDP_LAUNCHER_STORE", "1"},
    });
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = {self, filter, "--gtest_color=no"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&c.pid, self.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(rc, 0) << "posix_spawn of rank " << r << " failed: " << std::strerror(rc);
  }

  // Supervise: poll until all exit; after the first failure, or at the deadline, kill the rest.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + options.timeout;
  auto kill_at = deadline;
  int running = world_size;
  while (running > 0) {
    for (Child& c : children) {
      if (c.done) continue;
      if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.done = true;
        --running;
        const bool ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
        if (!ok) kill_at = std::min(kill_at, Clock::now() + options.grace);
      }
    }
    if (running > 0 && Clock::now() >= kill_at) {
      for (Child& c : children) {
        if (c.done) continue;
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &c.status, 0);
        c.done = c.killed = true;
        --running;
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  for (int r = 0; r < world_size; ++r) {
    const Child& c = children[r];
    std::string how;
    if (c.killed) {
      how = "was killed: it outlived the test's timeout or the grace period after another rank failed";
    } else if (WIFSIGNALED(c.status)) {
      how = absl::StrCat("died from signal ", WTERMSIG(c.status), " (", strsignal(WTERMSIG(c.status)), ")");
    } else if (WEXITSTATUS(c.status) != 0) {
      how = absl::StrCat("exited with code ", WEXITSTATUS(c.status));
    }
    if (!how.empty()) {
      ADD_FAILURE() << "rank " << r << " of " << world_size << " " << how << ". Its output:\n"
                    << ReadTail(c.log, 20000);
    }
    std::remove(c.log.c_str());
  }
}

}  // namespace tinyddp::dist::testing
