// Helpers for the tests that run //examples:ddp_mlp as a subprocess, the way a user does: find the
// binary (runfiles, or $DDP_MLP_BINARY outside Bazel), run it as a fresh job (no launcher variables
// inherited, so it starts its own ranks), and read what it printed and wrote.
#ifndef TINYDDP_TESTS_DDP_MLP_RUN_DDP_MLP_H_
#define TINYDDP_TESTS_DDP_MLP_RUN_DDP_MLP_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tinyddp::testing {

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or by the 4-minute bound
  std::string out, err;
};

/// The tiny synthetic job the tests train: 1200 examples of 32 features labelled by a random teacher,
/// a 32-24-10 MLP, batch 32 per rank on 2 ranks over `backend`: 19 steps per epoch. `more` follows.
std::vector<std::string> TinyJob(const std::string& backend, const std::vector<std::string>& more);
inline constexpr int kTinyStepsPerEpoch = 19;

/// Runs ddp_mlp with `flags`, `env` added to the environment, and waits (at most 4 minutes).
RunResult RunDdpMlp(const std::vector<std::string>& flags,
                    const std::vector<std::pair<std::string, std::string>>& env = {});

/// Both outputs, for failure messages.
std::string Explain(const RunResult& r);

/// A new empty folder under TEST_TMPDIR named `name`.
std::string FreshDir(const std::string& name);

/// "step-00000007": the folder of the checkpoint of `step` (examples/internal/train_checkpoint.h).
std::string CheckpointName(int64_t step);
/// The newest step-* folder in `dir` ("" when none).
std::string NewestCheckpoint(const std::string& dir);
/// True when two checkpoints' model.safetensors and optimizer.safetensors are byte-identical.
bool SameModelAndOptimizer(const std::string& a, const std::string& b);

/// From a --metrics_out file: the first logged step loss, and the last epoch's test accuracy
/// (-1 when absent).
double FirstLoggedLoss(const std::string& jsonl);
double LastTestAccuracy(const std::string& jsonl);

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_DDP_MLP_RUN_DDP_MLP_H_
