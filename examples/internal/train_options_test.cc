// TrainOptions: defaults, cross-field checks with messages naming the flag, and paths resolved where
// the user typed `bazel run`.
#include "examples/internal/train_options.h"

#include <string>
#include <vector>

#include "examples/internal/user_path.h"
#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

TEST(TrainOptions, DefaultsAreTheNewcomerRun) {
  absl::StatusOr<TrainOptions> o = ParseTrainOptions({}, "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->hidden, (std::vector<int64_t>{512, 512}));
  EXPECT_EQ(o->batch_size, 64);
  EXPECT_EQ(o->optimizer, "sgd");
  EXPECT_EQ(o->dataset, "fashion_mnist");
  EXPECT_TRUE(o->shuffle);
  EXPECT_FALSE(o->resume);
}

TEST(TrainOptions, OutOfRangeValuesNameTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--epochs=0", "--epochs: must be >= 1"},
      {"--batch_size=0", "--batch_size: must be in [1, 1048576]"},
      {"--lr=-0.1", "--lr: must be > 0"},
      {"--momentum=1", "--momentum: must be in [0, 1)"},
      {"--max_steps=-3", "--max_steps: must be >= 0"},
      {"--resume", "--resume: needs --checkpoint_dir"},
      {"--lr_gamma=1.5", "--lr_gamma: must be in (0, 1]"},
  };
  for (const auto& [arg, want] : cases) {
    absl::StatusOr<TrainOptions> o = ParseTrainOptions({arg}, "");
    ASSERT_FALSE(o.ok()) << arg;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(want), std::string::npos) << o.status().message();
  }
  absl::StatusOr<TrainOptions> o = ParseTrainOptions({"--dataset=synthetic", "--data_dir=/x"}, "");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--data_dir"), std::string::npos);
}

TEST(TrainOptions, RelativePathsResolveAgainstTheWorkingDirectory) {
  absl::StatusOr<TrainOptions> o = ParseTrainOptions(
      {"--metrics_out=out/m.jsonl", "--checkpoint_dir=./ck", "--trace=/abs/t.json", "--init_from=w.safetensors"},
      "/home/me/proj");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->metrics_out, "/home/me/proj/out/m.jsonl");
  EXPECT_EQ(o->checkpoint_dir, "/home/me/proj/ck");
  EXPECT_EQ(o->trace, "/abs/t.json");
  EXPECT_EQ(o->init_from, "/home/me/proj/w.safetensors");
}

TEST(UserPath, KeepsPathsWithoutAWorkingDirectoryAndExpandsHome) {
  EXPECT_EQ(ResolveUserPath("a/b", ""), "a/b");
  EXPECT_EQ(ResolveUserPath("", "/w"), "");
  EXPECT_EQ(ResolveUserPath(".", "/w/"), "/w/");
  EXPECT_EQ(ResolveUserPath("../up", "/w"), "/w/../up");
  setenv("HOME", "/home/tester", 1);
  EXPECT_EQ(ResolveUserPath("~/x.jsonl", "/w"), "/home/tester/x.jsonl");
}

TEST(TrainOptions, TrajectorySettingsIncludeWhatChangesTheParameters) {
  absl::StatusOr<TrainOptions> cosine = ParseTrainOptions({"--lr_schedule=cosine", "--epochs=4"}, "");
  absl::StatusOr<TrainOptions> constant = ParseTrainOptions({"--lr_schedule=constant", "--epochs=4"}, "");
  ASSERT_TRUE(cosine.ok() && constant.ok());
  // The cosine curve depends on the run's length; a constant one does not, so it may be extended.
  EXPECT_EQ(cosine->TrajectorySettings(2).at("epochs"), "4");
  EXPECT_EQ(constant->TrajectorySettings(2).count("epochs"), 0u);
  EXPECT_EQ(constant->TrajectorySettings(3).at("world_size"), "3");
  EXPECT_EQ(constant->TrajectorySettings(3).at("hidden"), "512,512");
}

}  // namespace
}  // namespace tinyddp::examples
