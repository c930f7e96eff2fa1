// Running ddp_mlp as a subprocess: see run_ddp_mlp.h.
#include "tests/ddp_mlp/run_ddp_mlp.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/testing/process_test_util.h"
#include "nlohmann/json.hpp"

namespace tinyddp::testing {
namespace {

std::string BinaryPath() {
  if (const char* explicit_path = std::getenv("DDP_MLP_BINARY")) return explicit_path;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir != nullptr ? srcdir : ".") + "/" + (workspace != nullptr ? workspace : "tinyddp") +
         "/examples/ddp_mlp";
}

std::vector<nlohmann::json> Records(const std::string& jsonl) {
  std::vector<nlohmann::json> out;
  for (absl::string_view line : absl::StrSplit(jsonl, '\n', absl::SkipWhitespace())) {
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace

std::vector<std::string> TinyJob(const std::string& backend, const std::vector<std::string>& more) {
  std::vector<std::string> flags = {"--dataset=synthetic",
                                    "--synthetic_examples=1200",
                                    "--synthetic_input_size=32",
                                    "--hidden=24",
                                    "--batch_size=32",
                                    "--nproc=2",
                                    "--backend=" + backend,
                                    "--lr=0.2",
                                    "--log_every=5"};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

RunResult RunDdpMlp(const std::vector<std::string>& flags,
                    const std::vector<std::pair<std::string, std::string>>& env) {
  static int counter = 0;
  const std::string dir = dist::testing::MakeTempDir();
  std::vector<std::string> argv = {BinaryPath()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string out = dir + "/out" + std::to_string(counter) + ".txt";
  const std::string err = dir + "/err" + std::to_string(counter++) + ".txt";
  std::vector<std::string> unset = dist::testing::LauncherVariables();
  unset.push_back("BUILD_WORKING_DIRECTORY");
  const pid_t pid = dist::testing::StartProcess(argv, env, unset, out, err);
  const std::optional<int> status = dist::testing::WaitFor(pid, std::chrono::minutes(4));
  RunResult r;
  r.out = dist::testing::ReadFile(out);
  r.err = dist::testing::ReadFile(err);
  if (status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  return r;
}

std::string Explain(const RunResult& r) { return "stdout:\n" + r.out + "\nstderr:\n" + r.err; }

std::string FreshDir(const std::string& name) {
  const std::string dir = dist::testing::MakeTempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

double FirstLoggedLoss(const std::string& jsonl) {
  for (const nlohmann::json& j : Records(jsonl)) {
    if (j["type"] == "step") return j["loss"].get<double>();
  }
  return -1;
}

double LastTestAccuracy(const std::string& jsonl) {
  double accuracy = -1;
  for (const nlohmann::json& j : Records(jsonl)) {
    if (j["type"] == "epoch") accuracy = j["test_accuracy"].get<double>();
  }
  return accuracy;
}

std::string CheckpointName(int64_t step) {
  const std::string digits = absl::StrCat(step);
  return "step-" + std::string(digits.size() < 8 ? 8 - digits.size() : 0, '0') + digits;
}

std::string NewestCheckpoint(const std::string& dir) {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    int64_t step = 0;
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "step-") && absl::SimpleAtoi(name.substr(5), &step) && step > newest) newest = step;
  }
  return newest < 0 ? "" : absl::StrCat(dir, "/", CheckpointName(newest));
}

bool SameModelAndOptimizer(const std::string& a, const std::string& b) {
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string x = dist::testing::ReadFile(a + file);
    if (x.empty() || x != dist::testing::ReadFile(b + file)) return false;
  }
  return true;
}

}  // namespace tinyddp::testing
