// Training checkpoints: a round trip restores weights, optimizer state and progress bit for bit; a
// damaged newest checkpoint (data file or trainer state) is refused with the reason and the previous
// good one is chosen; impossible progress is refused even under a valid checksum; version-1 checkpoints
// still load, but a version lowered by hand is refused; settings that differ are refused; only the
// newest `keep` checkpoints stay, and never at the cost of the last good one; a FIFO in place of a file
// is refused at once; a full disk or a read-only folder fails permanently; temporaries left by a kill are
// removed.
#include "examples/internal/train_checkpoint.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "examples/internal/durable_file.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::examples {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  fs::remove_all(dir);
  return dir;
}

// A small model after `steps` SGD-momentum steps on random data, so every weight and momentum
// buffer holds non-trivial values.
struct Trained {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::SGD> sgd;
};
Trained MakeTrained(uint64_t seed, int steps) {
  Trained t;
  t.model = nn::MLP({13, 7, 5}, {.seed = seed});
  t.sgd = std::make_unique<nn::SGD>(t.model->Parameters(), nn::SgdOptions{.lr = 0.1, .momentum = 0.9});
  Tensor x = Tensor::Empty({9, 13});
  ops::NormalInit(x, 0, 1, seed + 100);
  const Tensor labels = Tensor::FromVector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2, 3}, {9});
  for (int i = 0; i < steps; ++i) {
    t.sgd->ZeroGrad();
    autograd::Backward(nn::CrossEntropyLoss()((*t.model)(autograd::Variable(x)), labels));
    t.sgd->Step();
  }
  return t;
}

std::vector<float> Flat(const nn::TensorMap& m) {
  std::vector<float> out;
  for (const auto& [name, t] : m) {
    const std::vector<float> v = t.ToVector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

const SettingsMap kSettings = {{"lr", "0.1"}, {"world_size", "2"}, {"hidden", "7"}};
constexpr int64_t kSpe = 50;  // steps per epoch of the runs these checkpoints pretend to come from

// Where a run of kSpe steps per epoch stands after `step` steps (the loss tally of a fresh epoch).
TrainingProgress At(int64_t step) {
  return {.global_step = step, .epoch = step / kSpe, .batch_in_epoch = step % kSpe, .steps_per_epoch = kSpe};
}

nlohmann::json ReadManifest(const std::string& checkpoint) {
  return nlohmann::json::parse(ReadWholeFile(checkpoint + "/trainer_state.json").value());
}
void WriteManifest(const std::string& checkpoint, const nlohmann::json& j) {
  ASSERT_TRUE(WriteFileDurably(checkpoint + "/trainer_state.json", j.dump(2)).ok());
}
// What a writer that knows the format would record as the manifest's own checksum.
uint32_t Checksum(nlohmann::json j) {
  j.erase("crc32");
  return Crc32(j.dump());
}

TEST(TrainCheckpoint, RoundTripRestoresWeightsOptimizerStateAndProgressExactly) {
  const std::string dir = FreshDir("roundtrip");
  Trained a = MakeTrained(1, 3);
  const TrainingProgress progress{.global_step = 117,
                                  .epoch = 2,
                                  .batch_in_epoch = 17,
                                  .epoch_loss_sum = 8.123456789012345,
                                  .epoch_loss_count = 17,
                                  .steps_per_epoch = kSpe};
  absl::StatusOr<std::string> path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, progress, kSettings, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/step-00000117");
  EXPECT_TRUE(fs::exists(*path + "/model.safetensors"));

  const auto as_map = [](const nn::Module& m) {
    const auto sd = m.StateDict();
    return nn::TensorMap(sd.begin(), sd.end());
  };
  Trained b = MakeTrained(2, 1);  // different weights and momentum
  ASSERT_NE(Flat(as_map(*a.model)), Flat(as_map(*b.model)));
  absl::StatusOr<TrainingProgress> loaded = LoadTrainingCheckpoint(*path, kSettings, kSpe, *b.model, *b.sgd);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->global_step, 117);
  EXPECT_EQ(loaded->epoch, 2);
  EXPECT_EQ(loaded->batch_in_epoch, 17);
  EXPECT_EQ(loaded->epoch_loss_sum, progress.epoch_loss_sum);  // bitwise, through JSON
  EXPECT_EQ(loaded->epoch_loss_count, 17);
  EXPECT_EQ(Flat(as_map(*a.model)), Flat(as_map(*b.model)));
  EXPECT_EQ(Flat(a.sgd->StateTensors()), Flat(b.sgd->StateTensors()));
}

TEST(TrainCheckpoint, DamagedNewestIsRefusedWithTheReasonAndThePreviousGoodOneIsChosen) {
  const std::string dir = FreshDir("fallback");
  Trained a = MakeTrained(3, 2);
  for (int64_t step : {100, 200, 300}) {
    ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(step), kSettings, 5).ok());
  }
  // 300: one flipped bit in the weights. 200: truncated optimizer state.
  const std::string w300 = dir + "/step-00000300/model.safetensors";
  std::string bytes = ReadWholeFile(w300).value();
  bytes[bytes.size() - 5] ^= 0x10;
  ASSERT_TRUE(WriteFileDurably(w300, bytes).ok());
  const std::string o200 = dir + "/step-00000200/optimizer.safetensors";
  bytes = ReadWholeFile(o200).value();
  ASSERT_TRUE(WriteFileDurably(o200, bytes.substr(0, bytes.size() / 2)).ok());
  // A leftover temporary folder from a crash is not a checkpoint.
  fs::create_directories(dir + "/.tmp-step-00000400-77");

  std::vector<std::string> rejected;
  auto found = FindLatestGoodCheckpoint(dir, &rejected);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->progress.global_step, 100);
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_NE(rejected[0].find("step-00000300: model.safetensors fails its checksum"), std::string::npos) << rejected[0];
  EXPECT_NE(rejected[1].find("step-00000200: optimizer.safetensors has"), std::string::npos) << rejected[1];
  EXPECT_NE(rejected[1].find("(truncated?)"), std::string::npos);

  // Loading a damaged one directly is refused too.
  Trained b = MakeTrained(4, 1);
  auto loaded = LoadTrainingCheckpoint(dir + "/step-00000300", kSettings, kSpe, *b.model, *b.sgd);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);

  // With every checkpoint damaged there is nothing to fall back to: an error listing each.
  fs::remove(dir + "/step-00000100/trainer_state.json");
  auto none = FindLatestGoodCheckpoint(dir, &rejected);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(none.status().message().find("trainer_state.json is missing"), std::string::npos) << none.status();
}

TEST(TrainCheckpoint, EmptyOrMissingFolderHasNoCheckpoint) {
  auto found = FindLatestGoodCheckpoint(FreshDir("does_not_exist"), nullptr);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  EXPECT_TRUE(CheckpointSteps(FreshDir("does_not_exist")).empty());
}

TEST(TrainCheckpoint, StepsAreListedNewestFirstWithoutTemporaryFolders) {
  const std::string dir = FreshDir("listing");
  for (const char* name : {"step-00000007", "step-00000123", ".tmp-step-00000999-5", "step-x", "notes"}) {
    fs::create_directories(dir + "/" + name);
  }
  WriteFileDurably(dir + "/step-00000500", "a file, not a checkpoint folder").IgnoreError();
  EXPECT_EQ(CheckpointSteps(dir), (std::vector<int64_t>{123, 7}));
}

TEST(TrainCheckpoint, DifferentSettingsAreRefusedNamingEachDifference) {
  const std::string dir = FreshDir("settings");
  Trained a = MakeTrained(5, 1);
  auto path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(7), kSettings, 3);
  ASSERT_TRUE(path.ok());
  SettingsMap other = kSettings;
  other["lr"] = "0.05";
  other["world_size"] = "4";
  auto loaded = LoadTrainingCheckpoint(*path, other, kSpe, *a.model, *a.sgd);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("--lr: checkpoint 0.1, this run 0.05"), std::string::npos)
      << loaded.status();
  EXPECT_NE(loaded.status().message().find("world_size: checkpoint 2, this run 4"), std::string::npos);
  // The same settings over data of another size: refused for its steps per epoch.
  loaded = LoadTrainingCheckpoint(*path, kSettings, 2 * kSpe, *a.model, *a.sgd);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("50 steps per epoch and this run has 100"), std::string::npos)
      << loaded.status();
}

TEST(TrainCheckpoint, KeepsOnlyTheNewestAndReplacesTheSameStep) {
  const std::string dir = FreshDir("retention");
  Trained a = MakeTrained(6, 1);
  for (int64_t step : {5, 10, 15, 20}) {
    ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(step), kSettings, 2).ok());
  }
  TrainingProgress again = At(20);
  again.epoch_loss_sum = 9;
  again.epoch_loss_count = 20;
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, again, kSettings, 2).ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000015", "step-00000020"}));
  EXPECT_EQ(VerifyCheckpoint(dir + "/step-00000020").value().progress.epoch_loss_sum, 9);
}

TEST(TrainCheckpoint, AnEditedTrainerStateIsRefusedLikeADamagedFileAndThePreviousOneIsChosen) {
  const std::string dir = FreshDir("edited_state");
  Trained a = MakeTrained(7, 2);
  for (int64_t step : {50, 100}) {
    ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(step), kSettings, 5).ok());
  }
  // The example: one byte of trainer_state.json, "epoch": 2 -> 3 (a resume would skip an epoch).
  const std::string newest = dir + "/step-00000100";
  std::string text = ReadWholeFile(newest + "/trainer_state.json").value();
  const size_t at = text.find("\"epoch\": 2");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 9] = '3';
  ASSERT_TRUE(WriteFileDurably(newest + "/trainer_state.json", text).ok());

  std::vector<std::string> rejected;
  auto found = FindLatestGoodCheckpoint(dir, &rejected);
  ASSERT_TRUE(found.ok() && found->has_value()) << found.status();
  EXPECT_EQ((*found)->progress.global_step, 50);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find("step-00000100: trainer_state.json fails its checksum"), std::string::npos)
      << rejected[0];
  EXPECT_NE(rejected[0].find("edited or damaged"), std::string::npos) << rejected[0];
}

TEST(TrainCheckpoint, ImpossibleProgressIsRefusedEvenUnderAValidChecksum) {
  const std::string dir = FreshDir("impossible");
  Trained a = MakeTrained(8, 1);
  auto path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(60), kSettings, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  const std::pair<const char*, int64_t> edits[] = {
      {"batch_in_epoch", 1000000000000000},  // the issue's: a resume would skip batches forever
      {"epoch", 3},                          // past the step count
      {"global_step", -1},
  };
  const nlohmann::json original = ReadManifest(*path);
  for (const auto& [field, value] : edits) {
    nlohmann::json j = original;
    j["progress"][field] = value;
    j["crc32"] = Checksum(j);  // someone who knows the format, or a bug: the checksum alone passes
    WriteManifest(*path, j);
    auto info = VerifyCheckpoint(*path);
    ASSERT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << field;
    EXPECT_NE(info.status().message().find("trainer_state.json holds an impossible progress"), std::string::npos)
        << info.status();
  }
  nlohmann::json j = original;
  j["progress"]["batch_in_epoch"] = 1000000000000000;
  j["crc32"] = Checksum(j);
  WriteManifest(*path, j);
  EXPECT_NE(VerifyCheckpoint(*path).status().message().find("batch_in_epoch 1000000000000000 cannot exceed"),
            std::string::npos);
  // Saving impossible progress is refused before anything is written.
  TrainingProgress bad = At(10);
  bad.batch_in_epoch = 70;
  auto saved = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, bad, kSettings, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(saved.status())) << saved.status();
  EXPECT_FALSE(fs::exists(dir + "/step-00000010"));
}

TEST(TrainCheckpoint, AVersion1CheckpointStillLoadsAndIsRangeCheckedAgainstThisRun) {
  const std::string dir = FreshDir("version1");
  Trained a = MakeTrained(9, 2);
  TrainingProgress p = At(75);
  p.epoch_loss_sum = 30.5;
  p.epoch_loss_count = 25;
  auto path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, p, kSettings, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  // What the previous release wrote: no checksum of its own, no steps_per_epoch.
  nlohmann::json j = ReadManifest(*path);
  j["version"] = 1;
  j.erase("crc32");
  j["progress"].erase("steps_per_epoch");
  j["progress"].erase("bucket_order");
  WriteManifest(*path, j);

  auto info = VerifyCheckpoint(*path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version, 1);
  EXPECT_EQ(info->progress.steps_per_epoch, 0);
  Trained b = MakeTrained(10, 1);
  auto loaded = LoadTrainingCheckpoint(*path, kSettings, kSpe, *b.model, *b.sgd);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->global_step, 75);
  EXPECT_EQ(loaded->steps_per_epoch, kSpe);
  EXPECT_EQ(loaded->epoch_loss_sum, 30.5);
  // A run whose epochs have another length cannot be at step 75 = epoch 1, batch 25.
  auto misfit = LoadTrainingCheckpoint(*path, kSettings, 20, *b.model, *b.sgd);
  EXPECT_EQ(misfit.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(misfit.status().message().find("batch_in_epoch 25 is not below steps_per_epoch 20"), std::string::npos)
      << misfit.status();
}

TEST(TrainCheckpoint, TheBucketLayoutTravelsAndAVersion2CheckpointLoadsWithoutIt) {
  const std::string dir = FreshDir("layout");
  Trained a = MakeTrained(9, 2);
  TrainingProgress p = At(40);
  p.bucket_order = {"2.weight", "2.bias", "0.weight", "0.bias"};
  auto path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, p, kSettings, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  Trained b = MakeTrained(10, 1);
  auto loaded = LoadTrainingCheckpoint(*path, kSettings, kSpe, *b.model, *b.sgd);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->bucket_order, p.bucket_order);

  // What the previous release wrote: version 2, its own checksum, no layout. It loads, with none.
  nlohmann::json j = ReadManifest(*path);
  j["version"] = 2;
  j["progress"].erase("bucket_order");
  j["crc32"] = Checksum(j);
  WriteManifest(*path, j);
  auto old = LoadTrainingCheckpoint(*path, kSettings, kSpe, *b.model, *b.sgd);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->bucket_order.empty());
  EXPECT_EQ(old->global_step, 40);
}

TEST(TrainCheckpoint, ANewerFormatVersionIsRefusedSayingSo) {
  const std::string dir = FreshDir("version3");
  Trained a = MakeTrained(11, 1);
  auto path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(5), kSettings, 3);
  ASSERT_TRUE(path.ok());
  nlohmann::json j = ReadManifest(*path);
  j["version"] = kCheckpointVersion + 1;
  j["crc32"] = Checksum(j);
  WriteManifest(*path, j);
  auto info = VerifyCheckpoint(*path);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(info.status().message().find(absl::StrCat("written by a newer tinyddp; this build reads versions 1 to ",
                                                      kCheckpointVersion)),
            std::string::npos)
      << info.status();
}

TEST(TrainCheckpoint, TemporariesLeftByAKillAreRemovedAndNothingElse) {
  const std::string dir = FreshDir("stale");
  Trained a = MakeTrained(12, 1);
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(9), kSettings, 3).ok());
  for (const char* name : {".tmp-step-00000012-4242", ".tmp-step-00000009-77.old"}) {
    fs::create_directories(dir + "/" + name);
    ASSERT_TRUE(WriteFileDurably(dir + "/" + name + "/model.safetensors", "half written").ok());
  }
  ASSERT_TRUE(WriteFileDurably(dir + "/notes.txt", "the user's").ok());
  const std::vector<std::string> removed = RemoveStaleTemporaries(dir);
  EXPECT_EQ(removed, (std::vector<std::string>{dir + "/.tmp-step-00000009-77.old", dir + "/.tmp-step-00000012-4242"}));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"notes.txt", "step-00000009"}));
  EXPECT_TRUE(RemoveStaleTemporaries(FreshDir("missing")).empty());
}

TEST(TrainCheckpoint, RetentionNeverDeletesTheLastGoodCheckpointForADamagedNewerOne) {
  const std::string dir = FreshDir("retention_damaged");
  Trained a = MakeTrained(13, 2);
  for (int64_t step : {10, 20}) {
    ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(step), kSettings, 5).ok());
  }
  // A damaged checkpoint of a later step than the run writes now: the run resumed from step 20 after it
  // was refused, say. By step number it is the newest, and it must not count as one to keep.
  const std::string damaged = dir + "/step-00000090";
  fs::copy(dir + "/step-00000020", damaged);
  std::string bytes = ReadWholeFile(damaged + "/model.safetensors").value();
  bytes[bytes.size() - 3] ^= 0x04;
  ASSERT_TRUE(WriteFileDurably(damaged + "/model.safetensors", bytes).ok());

  auto saved = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(30), kSettings, /*keep=*/1);
  ASSERT_TRUE(saved.ok()) << saved.status();
  std::vector<std::string> rejected;
  auto found = FindLatestGoodCheckpoint(dir, &rejected);
  ASSERT_TRUE(found.ok()) << "retention deleted every good checkpoint: " << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->progress.global_step, 30);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find("step-00000090: model.safetensors fails its checksum"), std::string::npos) << rejected[0];
  // The good ones beyond `keep` went; the damaged one stays for a person to look at.
  EXPECT_EQ(CheckpointSteps(dir), (std::vector<int64_t>{90, 30}));

  // Two to keep: the two newest good ones, whatever lies above them.
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(40), kSettings, 2).ok());
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(50), kSettings, 2).ok());
  EXPECT_EQ(CheckpointSteps(dir), (std::vector<int64_t>{90, 50, 40}));
}

// Runs `find` on another thread; if it has not returned within 10 s (it is blocked opening one of
// `fifos`), fails and unblocks it by opening their other ends, so that a failing test ends instead of
// hanging.
template <typename T>
T WithinSeconds(std::function<T()> find, const std::vector<std::string>& fifos) {
  std::future<T> result = std::async(std::launch::async, std::move(find));
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "still waiting after 10 s: blocked opening a FIFO";
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      for (const std::string& fifo : fifos) {
        const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // succeeds once a reader waits
        if (fd >= 0) ::close(fd);
      }
    }
  }
  return result.get();
}

TEST(TrainCheckpoint, AFifoInPlaceOfACheckpointFileIsRefusedAtOnceAndResumeFallsBack) {
  const std::string dir = FreshDir("fifo");
  Trained a = MakeTrained(14, 1);
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(step), kSettings, 5).ok());
  }
  // The issue's: a FIFO as trainer_state.json (opening it for reading waits for a writer, forever).
  const std::string state = dir + "/step-00000030/trainer_state.json";
  const std::string weights = dir + "/step-00000020/model.safetensors";
  for (const std::string& path : {state, weights}) {
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << std::strerror(errno);
  }
  std::vector<std::string> rejected;
  const auto started = std::chrono::steady_clock::now();
  auto found = WithinSeconds<absl::StatusOr<std::optional<CheckpointInfo>>>(
      [&] { return FindLatestGoodCheckpoint(dir, &rejected); }, {state, weights});
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
  ASSERT_TRUE(found.ok() && found->has_value()) << found.status();
  EXPECT_EQ((*found)->progress.global_step, 10);
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_NE(rejected[0].find(state + " is a FIFO (named pipe), not a regular file"), std::string::npos) << rejected[0];
  EXPECT_NE(rejected[1].find("model.safetensors: " + weights + " is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << rejected[1];
}

TEST(TrainCheckpoint, LoweringTheVersionTo1DoesNotSwitchOffTheChecksum) {
  const std::string dir = FreshDir("downgrade");
  Trained a = MakeTrained(15, 2);
  auto path = SaveTrainingCheckpoint(dir, *a.model, *a.sgd, At(60), kSettings, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  // The issue's: "version": 3 -> 1 in the text, so that the checksum is no longer asked for, and an edit
  // it would have caught (the train loss the resumed epoch reports).
  std::string text = ReadWholeFile(*path + "/trainer_state.json").value();
  const size_t version = text.find(absl::StrCat("\"version\": ", kCheckpointVersion));
  ASSERT_NE(version, std::string::npos) << text;
  text[version + 11] = '1';
  ASSERT_TRUE(WriteFileDurably(*path + "/trainer_state.json", text).ok());
  auto info = VerifyCheckpoint(*path);
  ASSERT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << "a downgrade switched the checksum off";
  EXPECT_NE(info.status().message().find("trainer_state.json says version 1 but has \"crc32\" (added in version 2)"),
            std::string::npos)
      << info.status();
  EXPECT_NE(info.status().message().find("its version was lowered after it was written"), std::string::npos);

  // Without the checksum field, but with version 2's steps_per_epoch: refused the same way.
  nlohmann::json j = ReadManifest(*path);
  j.erase("crc32");
  WriteManifest(*path, j);
  EXPECT_NE(VerifyCheckpoint(*path).status().message().find("has \"progress/steps_per_epoch\" (added in version 2)"),
            std::string::npos);
}

// A tmpfs of `bytes` at `dir` (read-only if asked) in a mount namespace of this test process's own, so
// nothing outside it sees the mount. "" when mounted, else why it cannot be (not root, no CAP_SYS_ADMIN).
std::string MountTmpfs(const std::string& dir, size_t bytes, bool read_only) {
  static const std::string unshared = [] {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return std::string("making / private: ") + std::strerror(errno);
    }
    return std::string();
  }();
  if (!unshared.empty()) return unshared;
  fs::create_directories(dir);
  const std::string options = "size=" + std::to_string(bytes);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, options.c_str()) != 0) {
    return std::string("mount -t tmpfs: ") + std::strerror(errno);
  }
  return "";
}

TEST(TrainCheckpoint, AFullDiskOrAReadOnlyFolderFailsPermanently) {
  Trained a = MakeTrained(16, 1);
  const std::string full = FreshDir("full_disk");
  if (const std::string why = MountTmpfs(full, 4096, false); !why.empty()) GTEST_SKIP() << why;
  auto saved = SaveTrainingCheckpoint(full, *a.model, *a.sgd, At(10), kSettings, 3);
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(IsPermanent(saved.status())) << saved.status();
  EXPECT_NE(saved.status().message().find("No space left on device"), std::string::npos) << saved.status();
  EXPECT_NE(saved.status().message().find("the disk is full: 0.0 MiB free in " + full), std::string::npos)
      << saved.status();
  EXPECT_NE(saved.status().message().find("A restart would fail the same way"), std::string::npos);

  const std::string read_only = FreshDir("read_only");
  ASSERT_EQ(MountTmpfs(read_only, 1 << 20, true), "");
  saved = SaveTrainingCheckpoint(read_only + "/ckpt", *a.model, *a.sgd, At(10), kSettings, 3);
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(IsPermanent(saved.status())) << saved.status();
  EXPECT_NE(saved.status().message().find("the file system holding " + read_only + " is read-only"),
            std::string::npos)
      << saved.status();
}

}  // namespace
}  // namespace tinyddp::examples
