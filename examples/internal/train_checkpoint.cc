// Training checkpoints: see train_checkpoint.h.
#include "examples/internal/train_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "examples/internal/durable_file.h"
#include "nlohmann/json.hpp"
#include "nn/checkpoint.h"

namespace tinyddp::examples {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kFormat[] = "tinyddp.ddp_mlp.checkpoint";
constexpr char kManifest[] = "trainer_state.json";
constexpr char kTmpPrefix[] = ".tmp-step-";
constexpr const char* kDataFiles[] = {"model.safetensors", "optimizer.safetensors"};

absl::Status FsError(const std::string& what, const std::string& path, const std::error_code& ec) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", ec.message()));
}

json ProgressToJson(const TrainingProgress& p) {
  return {{"global_step", p.global_step},
          {"epoch", p.epoch},
          {"batch_in_epoch", p.batch_in_epoch},
          {"epoch_loss_sum", p.epoch_loss_sum},  // NaN (under --allow_nonfinite) is written as null
          {"epoch_loss_count", p.epoch_loss_count},
          {"steps_per_epoch", p.steps_per_epoch},
          {"bucket_order", p.bucket_order}};
}

// The manifest's own checksum: CRC-32 of its compact JSON without the "crc32" field. nlohmann's
// objects keep their keys sorted and print numbers so that they read back the same, so the text
// a reader rebuilds is the text the writer checksummed.
uint32_t ManifestCrc(json manifest) {
  manifest.erase("crc32");
  return Crc32(manifest.dump());
}

// What each version added that a reader checks, so that lowering "version" cannot switch the check off:
// a manifest that has such a field but names an older version was edited, and is refused.
struct AddedIn {
  const char* field;  // a JSON pointer into the manifest
  int version;
};
constexpr AddedIn kAddedIn[] = {{"/crc32", 2}, {"/progress/steps_per_epoch", 2}, {"/progress/bucket_order", 3}};

// The first field of `manifest` that `version` does not have ("/crc32 (version 2)"), or "".
std::string FieldOfALaterVersion(const json& manifest, int version) {
  for (const AddedIn& added : kAddedIn) {
    if (version < added.version && manifest.contains(json::json_pointer(added.field))) {
      return absl::StrCat("\"", added.field + 1, "\" (added in version ", added.version, ")");
    }
  }
  return "";
}

// Parses the manifest's fields; any missing or mistyped one throws (caught by the caller).
CheckpointInfo InfoFromJson(const json& j, const std::string& path, int version) {
  CheckpointInfo info;
  info.path = path;
  info.version = version;
  const json& p = j.at("progress");
  info.progress.global_step = p.at("global_step").get<int64_t>();
  info.progress.epoch = p.at("epoch").get<int64_t>();
  info.progress.batch_in_epoch = p.at("batch_in_epoch").get<int64_t>();
  const json& sum = p.at("epoch_loss_sum");
  info.progress.epoch_loss_sum = sum.is_null() ? std::nan("") : sum.get<double>();
  info.progress.epoch_loss_count = p.at("epoch_loss_count").get<double>();
  if (version >= 2) info.progress.steps_per_epoch = p.at("steps_per_epoch").get<int64_t>();
  if (version >= 3) info.progress.bucket_order = p.at("bucket_order").get<std::vector<std::string>>();
  info.settings = j.at("settings").get<SettingsMap>();
  return info;
}

// Steps 1-3 of SaveTrainingCheckpoint (train_checkpoint.h's "Atomicity"): the data files and the
// manifest into a temporary folder, renamed into place. Returns the new folder.
absl::StatusOr<std::string> WriteCheckpointFolder(const std::string& dir, const nn::Module& model,
                                                  const nn::Optimizer& optimizer, const TrainingProgress& progress,
                                                  const SettingsMap& settings) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return FsError("cannot create checkpoint folder", dir, ec);
  const std::string final_path = CheckpointPath(dir, progress.global_step);
  const std::string tmp = absl::StrFormat("%s/%s%08d-%d", dir, kTmpPrefix, progress.global_step, ::getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec)) return FsError("cannot create", tmp, ec);

  // 1. The data files, each written atomically and fsynced by nn/safetensors.h.
  const nn::StringMap metadata = {{"global_step", absl::StrCat(progress.global_step)},
                                  {"epoch", absl::StrCat(progress.epoch)}};
  absl::Status s = nn::SaveModule(model, tmp + "/model.safetensors", metadata);
  if (s.ok()) s = nn::SaveOptimizer(optimizer, tmp + "/optimizer.safetensors", metadata);
  // 2. The manifest last, recording what the data files must look like.
  json files = json::object();
  for (const char* name : kDataFiles) {
    if (!s.ok()) break;
    absl::StatusOr<std::string> bytes = ReadWholeFile(absl::StrCat(tmp, "/", name));
    if (!bytes.ok()) {
      s = bytes.status();
      break;
    }
    files[name] = {{"bytes", bytes->size()}, {"crc32", Crc32(*bytes)}};
  }
  if (s.ok()) {
    json manifest = {{"format", kFormat},
                     {"version", kCheckpointVersion},
                     {"progress", ProgressToJson(progress)},
                     {"settings", settings},
                     {"files", files}};
    manifest["crc32"] = ManifestCrc(manifest);
    s = WriteFileDurably(absl::StrCat(tmp, "/", kManifest), manifest.dump(2) + "\n");
  }
  if (s.ok()) s = FsyncDirectory(tmp);
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }

  // 3. Into place. A folder cannot be renamed over a non-empty one, so an older checkpoint of the same
  //    step (a rerun after resuming from an earlier one) is moved aside first and deleted after.
  const std::string old = tmp + ".old";
  const bool replacing = fs::exists(final_path, ec);
  if (replacing) {
    fs::rename(final_path, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      return FsError("cannot move aside", final_path, ec);
    }
  }
  fs::rename(tmp, final_path, ec);
  if (ec) return FsError(absl::StrCat("cannot rename ", tmp, " to"), final_path, ec);
  RETURN_IF_ERROR(FsyncDirectory(dir));
  if (replacing) fs::remove_all(old, ec);
  return final_path;
}

// What a checkpoint of `model` and `optimizer` takes on disk, about: their tensors, plus room for the
// headers and the manifest.
uint64_t CheckpointBytes(const nn::Module& model, const nn::Optimizer& optimizer) {
  uint64_t bytes = 64 << 10;
  for (const auto& [name, t] : nn::StateDictOf(model)) bytes += t.nbytes();
  for (const auto& [name, t] : optimizer.StateTensors()) bytes += t.nbytes();
  return bytes;
}

// The checkpoint of `step` in `dir`, verified, and its manifest agreeing with its folder's name.
absl::StatusOr<CheckpointInfo> VerifyAt(const std::string& dir, int64_t step) {
  absl::StatusOr<CheckpointInfo> info = VerifyCheckpoint(CheckpointPath(dir, step));
  if (info.ok() && info->progress.global_step != step) {
    return absl::DataLossError(absl::StrCat("its manifest says step ", info->progress.global_step,
                                            ", the folder name says ", step));
  }
  return info;
}

}  // namespace

std::string ProgressProblem(const TrainingProgress& p, int64_t steps_per_epoch) {
  if (p.global_step < 0 || p.epoch < 0 || p.batch_in_epoch < 0) {
    return absl::StrCat("global_step ", p.global_step, ", epoch ", p.epoch, " and batch_in_epoch ", p.batch_in_epoch,
                        " must all be >= 0");
  }
  if (p.batch_in_epoch > p.global_step || p.epoch > p.global_step) {
    return absl::StrCat("epoch ", p.epoch, " and batch_in_epoch ", p.batch_in_epoch,
                        " cannot exceed global_step ", p.global_step, " (every epoch takes at least one step)");
  }
  if (!(p.epoch_loss_count >= 0) || (std::isfinite(p.epoch_loss_sum) && p.epoch_loss_sum < 0)) {
    return absl::StrCat("epoch_loss_count ", p.epoch_loss_count, " and epoch_loss_sum ", p.epoch_loss_sum,
                        " must be >= 0");
  }
  if (steps_per_epoch <= 0) return "";
  if (p.batch_in_epoch >= steps_per_epoch) {
    return absl::StrCat("batch_in_epoch ", p.batch_in_epoch, " is not below steps_per_epoch ", steps_per_epoch);
  }
  if (p.epoch > p.global_step / steps_per_epoch || p.epoch * steps_per_epoch + p.batch_in_epoch != p.global_step) {
    return absl::StrCat("global_step ", p.global_step, " is not epoch ", p.epoch, " x steps_per_epoch ",
                        steps_per_epoch, " + batch_in_epoch ", p.batch_in_epoch);
  }
  if (p.epoch_loss_count > std::max(p.batch_in_epoch, steps_per_epoch)) {
    return absl::StrCat("epoch_loss_count ", p.epoch_loss_count, " exceeds the steps of an epoch (",
                        steps_per_epoch, ")");
  }
  return "";
}

std::vector<std::string> RemoveStaleTemporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (!absl::StartsWith(entry.path().filename().string(), kTmpPrefix)) continue;
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
    if (!remove_ec) removed.push_back(entry.path().string());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::vector<int64_t> CheckpointSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (absl::StartsWith(name, "step-") && absl::SimpleAtoi(name.substr(5), &step) && entry.is_directory(ec)) {
      steps.push_back(step);  // temporary folders start with '.', so they never match
    }
  }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  return steps;
}

std::string CheckpointPath(const std::string& dir, int64_t global_step) {
  return absl::StrFormat("%s/step-%08d", dir, global_step);
}

absl::StatusOr<std::string> SaveTrainingCheckpoint(const std::string& dir, const nn::Module& model,
                                                   const nn::Optimizer& optimizer, const TrainingProgress& progress,
                                                   const SettingsMap& settings, int64_t keep) {
  if (progress.steps_per_epoch < 1) {
    return absl::InvalidArgumentError("SaveTrainingCheckpoint: progress.steps_per_epoch must be set (>= 1)");
  }
  if (const std::string problem = ProgressProblem(progress, progress.steps_per_epoch); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("SaveTrainingCheckpoint: impossible progress: ", problem));
  }
  absl::StatusOr<std::string> written = WriteCheckpointFolder(dir, model, optimizer, progress, settings);
  if (!written.ok()) {
    // A full disk or a read-only folder fails the same way next time: say so, and mark it permanent.
    const std::string why = PermanentWriteProblem(dir, CheckpointBytes(model, optimizer));
    if (why.empty()) return written.status();
    return MarkPermanent(absl::Status(
        written.status().code(),
        absl::StrCat(written.status().message(), "; ", why, ". A restart would fail the same way: free some space "
                     "(or lower --keep_checkpoints) or pick another --checkpoint_dir, then --resume")));
  }
  // 4. Nothing older is deleted before the new checkpoint reads back as written.
  if (absl::StatusOr<CheckpointInfo> info = VerifyAt(dir, progress.global_step); !info.ok()) {
    return absl::DataLossError(absl::StrCat(
        *written, " does not verify right after it was written (", info.status().message(),
        "): the storage under ", dir, " may be failing; no checkpoint was deleted"));
  }
  // 5. Retention: the newest `keep` checkpoints that verify stay, and so does every one newer than the
  //    oldest of those (a damaged checkpoint never counts, and is left for a person to look at); older
  //    ones go. So the last good checkpoint is never deleted, whatever else is in the folder. This reads
  //    up to `keep` checkpoints back at every save: their size, at the speed of the page cache.
  int64_t good = 0;
  std::error_code ec;
  for (int64_t step : CheckpointSteps(dir)) {
    if (good >= std::max<int64_t>(keep, 1)) {
      fs::remove_all(CheckpointPath(dir, step), ec);
    } else if (step == progress.global_step || VerifyAt(dir, step).ok()) {
      ++good;
    }
  }
  return *written;
}

absl::StatusOr<CheckpointInfo> VerifyCheckpoint(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(absl::StrCat(path, "/", kManifest));
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::DataLossError(absl::StrCat(kManifest, " is missing (an interrupted or damaged write)"));
    }
    return text.status();
  }
  CheckpointInfo info;
  json files;
  try {
    const json j = json::parse(*text);
    if (j.at("format").get<std::string>() != kFormat) {
      return absl::DataLossError(absl::StrCat(kManifest, " is not a ", kFormat, " manifest"));
    }
    const int version = j.at("version").get<int>();
    if (version > kCheckpointVersion) {
      return absl::FailedPreconditionError(absl::StrCat(kManifest, " is in checkpoint format version ", version,
                                                        ", written by a newer tinyddp; this build reads versions 1 to ",
                                                        kCheckpointVersion));
    }
    if (version < 1) return absl::DataLossError(absl::StrCat(kManifest, " has an impossible version ", version));
    if (const std::string field = FieldOfALaterVersion(j, version); !field.empty()) {
      return absl::DataLossError(absl::StrCat(
          kManifest, " says version ", version, " but has ", field,
          ", which only later versions write: its version was lowered after it was written, which would skip "
          "that version's checks (the checksum); a checkpoint is never downgraded"));
    }
    if (version >= 2) {
      const uint32_t want = j.at("crc32").get<uint32_t>();
      const uint32_t crc = ManifestCrc(j);
      if (crc != want) {
        return absl::DataLossError(absl::StrFormat(
            "%s fails its checksum (CRC-32 %08x, recorded %08x): it was edited or damaged after it was written",
            kManifest, crc, want));
      }
    }
    info = InfoFromJson(j, path, version);
    files = j.at("files");
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(kManifest, " is damaged: ", e.what()));
  }
  if (info.version >= 2 && info.progress.steps_per_epoch < 1) {
    return absl::DataLossError(absl::StrCat(kManifest, ": steps_per_epoch ", info.progress.steps_per_epoch,
                                            " must be >= 1"));
  }
  if (const std::string problem = ProgressProblem(info.progress, info.progress.steps_per_epoch); !problem.empty()) {
    return absl::DataLossError(absl::StrCat(kManifest, " holds an impossible progress: ", problem));
  }
  for (const char* name : kDataFiles) {
    absl::StatusOr<std::string> bytes = ReadWholeFile(absl::StrCat(path, "/", name));
    if (!bytes.ok()) return absl::DataLossError(absl::StrCat(name, ": ", bytes.status().message()));
    uint64_t want_bytes = 0;
    uint32_t want_crc = 0;
    try {
      want_bytes = files.at(name).at("bytes").get<uint64_t>();
      want_crc = files.at(name).at("crc32").get<uint32_t>();
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(kManifest, " has no valid entry for ", name, ": ", e.what()));
    }
    if (bytes->size() != want_bytes) {
      return absl::DataLossError(
          absl::StrCat(name, " has ", bytes->size(), " bytes, the manifest says ", want_bytes, " (truncated?)"));
    }
    const uint32_t crc = Crc32(*bytes);
    if (crc != want_crc) {
      return absl::DataLossError(
          absl::StrFormat("%s fails its checksum (CRC-32 %08x, manifest %08x): the file "
                          "was damaged after it was written",
                          name, crc, want_crc));
    }
  }
  return info;
}

absl::StatusOr<std::optional<CheckpointInfo>> FindLatestGoodCheckpoint(const std::string& dir,
                                                                       std::vector<std::string>* rejected) {
  const std::vector<int64_t> steps = CheckpointSteps(dir);
  if (steps.empty()) return std::optional<CheckpointInfo>();
  std::vector<std::string> problems;
  for (int64_t step : steps) {
    absl::StatusOr<CheckpointInfo> info = VerifyAt(dir, step);
    if (info.ok()) {
      if (rejected != nullptr) *rejected = problems;
      return std::optional<CheckpointInfo>(*std::move(info));
    }
    problems.push_back(absl::StrCat(CheckpointPath(dir, step), ": ", info.status().message()));
  }
  if (rejected != nullptr) *rejected = problems;
  return absl::DataLossError(absl::StrCat("no good checkpoint in ", dir, "; every one is damaged:\n  ",
                                          absl::StrJoin(problems, "\n  "),
                                          "\nremove the folder (or pass another --checkpoint_dir) to start over"));
}

absl::StatusOr<TrainingProgress> LoadTrainingCheckpoint(const std::string& path, const SettingsMap& expected,
                                                        int64_t steps_per_epoch, nn::Module& model,
                                                        nn::Optimizer& optimizer) {
  absl::StatusOr<CheckpointInfo> info = VerifyCheckpoint(path);
  if (!info.ok()) return absl::Status(info.status().code(), absl::StrCat(path, ": ", info.status().message()));
  std::vector<std::string> differences;
  // Settings are flags, except the number of ranks.
  auto flag = [](const std::string& name) { return name == "world_size" ? name : "--" + name; };
  for (const auto& [name, value] : expected) {
    auto it = info->settings.find(name);
    const std::string saved = it == info->settings.end() ? "(not recorded)" : it->second;
    if (saved != value) differences.push_back(absl::StrCat(flag(name), ": checkpoint ", saved, ", this run ", value));
  }
  for (const auto& [name, value] : info->settings) {
    if (expected.count(name) == 0) {
      differences.push_back(absl::StrCat(flag(name), ": checkpoint ", value, ", this run (not used)"));
    }
  }
  // Permanent (durable_file.h): a restart would be refused the same way.
  if (!differences.empty()) {
    return MarkPermanent(absl::FailedPreconditionError(absl::StrCat(
        path, " was written by a run with different settings, so resuming would match neither run:\n  ",
        absl::StrJoin(differences, "\n  "), "\nrerun with the checkpoint's values, or use another --checkpoint_dir")));
  }
  TrainingProgress progress = info->progress;
  if (info->version >= 2 && progress.steps_per_epoch != steps_per_epoch) {
    return MarkPermanent(absl::FailedPreconditionError(absl::StrCat(
        path, " was written by a run with ", progress.steps_per_epoch, " steps per epoch and this run has ",
        steps_per_epoch, " (a dataset of another size?), so resuming would not continue it; use the same data, "
        "or another --checkpoint_dir")));
  }
  if (const std::string problem = ProgressProblem(progress, steps_per_epoch); !problem.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": its progress does not fit this run of ", steps_per_epoch,
                                            " steps per epoch (", problem, "): the checkpoint was edited or damaged"));
  }
  progress.steps_per_epoch = steps_per_epoch;
  absl::Status s = nn::LoadModule(model, path + "/model.safetensors");
  if (s.ok()) s = nn::LoadOptimizer(optimizer, path + "/optimizer.safetensors");
  RETURN_IF_ERROR(s);
  return progress;
}

}  // namespace tinyddp::examples
