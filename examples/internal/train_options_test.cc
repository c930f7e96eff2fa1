// TrainOptions: ddp_mlp's command line. Every spelling sets the field, every mistake names the flag and
// says why, --help lists every flag, the checks across fields, and paths resolved where the user typed
// `bazel run`.
#include "examples/internal/train_options.h"

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

TEST(TrainOptions, AcceptsEqualsSpaceSingleDashAndDashedNames) {
  absl::StatusOr<TrainOptions> o = ParseTrainOptions(
      {"--epochs=7", "--lr", "0.025", "-data-dir=/tmp/d", "--hidden=33,7,129", "--batch-size", "17"}, "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->epochs, 7);
  EXPECT_DOUBLE_EQ(o->lr, 0.025);
  EXPECT_EQ(o->data_dir, "/tmp/d");
  EXPECT_EQ(o->hidden, (std::vector<int64_t>{33, 7, 129}));
  EXPECT_EQ(o->batch_size, 17);
  o = ParseTrainOptions({"--hidden="}, "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->hidden.empty()) << "no hidden layer: 784-10";
}

TEST(TrainOptions, BooleansTakeBareNegatedAndExplicitForms) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"--noshuffle", false}, {"--shuffle=false", false}, {"--shuffle=no", false}, {"--shuffle=YES", true},
      {"--shuffle", true},
  };
  for (const auto& [arg, want] : cases) {
    absl::StatusOr<TrainOptions> o = ParseTrainOptions({arg}, "");
    ASSERT_TRUE(o.ok()) << arg << ": " << o.status();
    EXPECT_EQ(o->shuffle, want) << arg;
  }
}

TEST(TrainOptions, CudaGraphIsOffUnlessAskedForAndTakesEveryBooleanSpelling) {
  absl::StatusOr<TrainOptions> o = ParseTrainOptions({}, "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->cuda_graph);
  for (const auto& [arg, want] : std::vector<std::pair<std::string, bool>>{
           {"--cuda_graph", true}, {"--cuda-graph=true", true}, {"--nocuda_graph", false}}) {
    o = ParseTrainOptions({arg}, "");
    ASSERT_TRUE(o.ok()) << arg << ": " << o.status();
    EXPECT_EQ(o->cuda_graph, want) << arg;
  }
  // It changes how steps run, not what they compute: a checkpoint of either mode resumes in the other.
  o = ParseTrainOptions({"--cuda_graph"}, "");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->TrajectorySettings(2), ParseTrainOptions({}, "")->TrajectorySettings(2));
  EXPECT_TRUE(absl::StrContains(TrainUsage(), "--cuda_graph"));
}

TEST(TrainOptions, EveryParseStartsFromTheDefaults) {
  // The flags are process-wide Abseil flags; a second parse must not inherit the first one's values.
  ASSERT_TRUE(ParseTrainOptions({"--epochs=9", "--noshuffle", "--optimizer=adamw"}, "").ok());
  absl::StatusOr<TrainOptions> o = ParseTrainOptions({"--lr=0.5"}, "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->epochs, 4);
  EXPECT_TRUE(o->shuffle);
  EXPECT_EQ(o->optimizer, "sgd");
}

TEST(TrainOptions, UnknownFlagsAndStrayArgumentsAreNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--epochs=2", "--epoch=3"}, "unknown flag --epoch"},
      {{"--nolr"}, "unknown flag --nolr"},
      {{"stray"}, "unexpected argument \"stray\": this program takes flags only"},
      {{"--", "stray"}, "unexpected argument \"stray\""},
  };
  for (const auto& [args, want] : cases) {
    absl::StatusOr<TrainOptions> o = ParseTrainOptions(args, "");
    ASSERT_FALSE(o.ok()) << args.back();
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(want), std::string::npos) << "got: " << o.status().message();
  }
}

TEST(TrainOptions, BadValuesSayWhichFlagAndWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--epochs=abc", "--epochs=abc: expected an integer"},
      {"--epochs=2.5", "--epochs=2.5: expected an integer"},
      {"--lr=fast", "--lr=fast: expected a number"},
      {"--lr=nan", "--lr: must be a finite number, got nan"},
      {"--weight_decay=inf", "--weight_decay: must be a finite number, got inf"},
      {"--shuffle=maybe", "--shuffle=maybe: expected true or false"},
      {"--optimizer=adam", "--optimizer=adam: expected one of sgd, adamw"},
      {"--precision=fp16", "--precision=fp16: expected one of fp32, bf16"},
      {"--backend=mpi", "--backend=mpi: expected one of auto, gloo, nccl"},
      {"--hidden=512,,3", "--hidden=512,,3: expected comma-separated positive integers"},
      {"--hidden=-4", "--hidden=-4: expected comma-separated positive integers"},
      {"--lr", "--lr needs a value (--lr=VALUE)"},
      {"--zero=4", "--zero: must be 0 (plain DDP), 1 (sharded optimizer state), 2 (and gradients) or 3 (and "
                   "parameters), got 4"},
  };
  for (const auto& [arg, want] : cases) {
    absl::StatusOr<TrainOptions> o = ParseTrainOptions({arg}, "");
    ASSERT_FALSE(o.ok()) << arg;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(want), std::string::npos)
        << "got: " << o.status().message() << "\nwant: " << want;
  }
}

TEST(TrainOptions, HelpStopsParsingAndListsEveryFlagWithItsDefault) {
  absl::StatusOr<TrainOptions> o = ParseTrainOptions({"--help", "--bogus"}, "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->help);
  const std::string usage = TrainUsage();
  EXPECT_NE(usage.find("  --epochs                 passes over the training set [default: 4]"), std::string::npos)
      << usage;
  EXPECT_NE(usage.find("[default: \"512,512\"]"), std::string::npos);
  EXPECT_NE(usage.find("(sgd|adamw)"), std::string::npos);
  EXPECT_NE(usage.find("model and optimisation:"), std::string::npos);
  // Every flag defined for ddp_mlp is accepted and shown: none was left out of the groups.
  int listed = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::EndsWith(flag->Filename(), "examples/internal/train_options.cc")) continue;
    ++listed;
    EXPECT_NE(usage.find(absl::StrCat("  --", name, " ")), std::string::npos) << "--help misses --" << name;
    const std::string arg = absl::StrCat("--", name, "=", flag->DefaultValue());
    EXPECT_TRUE(ParseTrainOptions({arg}, "").ok()) << arg;
  }
  EXPECT_EQ(listed, 51);
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

TEST(TrainOptions, DdpSettingsTheChosenRungDoesNotHaveAreRefusedNotIgnored) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ddp=naive", "--bucket_cap_mb=4"},
       "--bucket_cap_mb applies to --ddp=bucketed or --ddp=full, not to --ddp=naive"},
      {{"--ddp=flat", "--first_bucket_mb=2"}, "--first_bucket_mb applies to --ddp=bucketed or --ddp=full"},
      {{"--ddp=bucketed", "--find_unused_parameters"}, "--find_unused_parameters applies to --ddp=full, not to"},
      {{"--ddp=bucketed", "--comm_hook=bf16"}, "--comm_hook applies to --ddp=full, not to --ddp=bucketed"},
      {{"--ddp=fastest"}, "--ddp=fastest: expected one of naive, flat, bucketed, full"},
      {{"--comm_hook=fp16"}, "--comm_hook=fp16: expected one of allreduce, bf16"},
      {{"--grad_accum_steps=0"}, "--grad_accum_steps: must be in [1, 65536]"},
      {{"--bucket_cap_mb=0"}, "--bucket_cap_mb: must be > 0 MiB"},
      {{"--zero=2", "--comm_hook=bf16"}, "--zero: reduce-scatters the buckets itself"},
  };
  for (const auto& [args, want] : cases) {
    absl::StatusOr<TrainOptions> o = ParseTrainOptions(args, "");
    ASSERT_FALSE(o.ok()) << absl::StrJoin(args, " ");
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(want), std::string::npos) << o.status().message();
  }
  absl::StatusOr<TrainOptions> bucketed =
      ParseTrainOptions({"--ddp=bucketed", "--bucket_cap_mb=0.5", "--first_bucket_mb=0.25"}, "");
  ASSERT_TRUE(bucketed.ok()) << bucketed.status();
  EXPECT_EQ(bucketed->bucket_cap_mb, 0.5);
  absl::StatusOr<TrainOptions> full = ParseTrainOptions({"--find_unused_parameters", "--comm_hook=bf16"}, "");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->ddp, "full");
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
  // bf16 rounds differently from fp32, so a checkpoint of one does not continue as the other.
  absl::StatusOr<TrainOptions> bf16 = ParseTrainOptions({"--precision=bf16"}, "");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->TrajectorySettings(2).at("precision"), "bf16");
  EXPECT_EQ(constant->TrajectorySettings(2).count("precision"), 0u) << "fp32 checkpoints from before the flag resume";
  // Accumulation changes the steps (a resume must keep it); the rung of the DDP ladder does not (they
  // compute the same average), and defaults are not recorded, so older checkpoints still resume.
  absl::StatusOr<TrainOptions> accumulated = ParseTrainOptions({"--grad_accum_steps=4", "--ddp=flat"}, "");
  ASSERT_TRUE(accumulated.ok());
  EXPECT_EQ(accumulated->TrajectorySettings(2).at("grad_accum_steps"), "4");
  EXPECT_EQ(accumulated->TrajectorySettings(2).count("ddp"), 0u);
  EXPECT_EQ(constant->TrajectorySettings(2).count("grad_accum_steps"), 0u);
}

TEST(TrainOptions, FailureFlagsAreReadAndCheckedAndTheTimeoutFlagWinsOverTheVariable) {
  ::unsetenv("TINYDDP_TIMEOUT");
  absl::StatusOr<TrainOptions> o = ParseTrainOptions(
      {"--timeout=20s", "--max_restarts=2", "--checkpoint_dir=/tmp/c", "--checkpoint_every=7", "--allow_nonfinite"},
      "");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->timeout.count(), 20000);
  EXPECT_EQ(o->max_restarts, 2);
  EXPECT_EQ(o->checkpoint_every, 7);
  EXPECT_TRUE(o->allow_nonfinite);
  EXPECT_EQ(ParseTrainOptions({}, "")->timeout.count(), 300000) << "the default";
  EXPECT_EQ(ParseTrainOptions({"--timeout=90"}, "")->timeout.count(), 90000) << "a bare number is seconds";
  ::setenv("TINYDDP_TIMEOUT", "2m", 1);
  EXPECT_EQ(ParseTrainOptions({}, "")->timeout.count(), 120000) << "the variable";
  EXPECT_EQ(ParseTrainOptions({"--timeout=5s"}, "")->timeout.count(), 5000) << "the flag wins";
  ::unsetenv("TINYDDP_TIMEOUT");

  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--timeout=soon"}, "--timeout=soon: expected seconds (30) or a duration with a unit"},
      {{"--timeout=0"}, "--timeout=0: must be between 1ms and 24h"},
      {{"--max_restarts=-1"}, "--max_restarts: must be in [0, 1000]"},
      {{"--checkpoint_every=10"}, "--checkpoint_every: needs --checkpoint_dir=DIR"},
  };
  for (const auto& [args, why] : bad) {
    absl::StatusOr<TrainOptions> r = ParseTrainOptions(args, "");
    ASSERT_FALSE(r.ok()) << args[0];
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace tinyddp::examples
