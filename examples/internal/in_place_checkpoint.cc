// SaveInPlaceCheckpoint, LoadLatestInPlaceCheckpoint: see in_place_checkpoint.h.
#include "examples/internal/in_place_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "nn/checkpoint.h"

namespace tinyddp::examples {


absl::Status SaveInPlaceCheckpoint(const std::string& dir, const nn::Module& model, const nn::Optimizer& optimizer,
                                   const Position& at, int replicas) {
  const std::string final_path = absl::StrFormat("%s/in_place-step-%08d", dir, at.step);
  const std::string tmp = final_path + ".tmp";
  std::error_code error;
  std::filesystem::remove_all(tmp, error);
  std::filesystem::create_directories(tmp, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("creating ", tmp, ": ", error.message()));
  RETURN_IF_ERROR(nn::SaveModule(model, tmp + "/model.safetensors"));
  RETURN_IF_ERROR(nn::SaveOptimizer(optimizer, tmp + "/optimizer.safetensors"));
  std::ofstream(tmp + "/progress.txt") << "step " << at.step << "\nepoch " << at.epoch << "\ncursor " << at.cursor
                                        << "\nplanned " << at.planned << "\nreplicas " << replicas << "\n";
  std::filesystem::remove_all(final_path, error);
  std::filesystem::rename(tmp, final_path, error);  // a half-written checkpoint never carries the final name
  if (error) return absl::PermissionDeniedError(absl::StrCat("renaming ", tmp, ": ", error.message()));
  std::printf("  in-place checkpoint: %s\n", final_path.c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Position>> LoadLatestInPlaceCheckpoint(const std::string& dir, nn::Module& model,
                                                                    nn::Optimizer& optimizer) {
  std::string newest;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("in_place-step-", 0) == 0 && name.find(".tmp") == std::string::npos && name > newest) newest = name;
  }
  if (newest.empty()) return std::optional<Position>();
  const std::string path = absl::StrCat(dir, "/", newest);
  RETURN_IF_ERROR(nn::LoadModule(model, path + "/model.safetensors"));
  RETURN_IF_ERROR(nn::LoadOptimizer(optimizer, path + "/optimizer.safetensors"));
  std::ifstream in(path + "/progress.txt");
  std::string key;
  Position at;
  in >> key >> at.step >> key >> at.epoch >> key >> at.cursor >> key >> at.planned;
  if (!in) return absl::DataLossError(absl::StrCat(path, "/progress.txt: unreadable"));
  return std::optional<Position>(at);
}

}  // namespace tinyddp::examples
