// ResolveUserPath: see user_path.h.
#include "examples/internal/user_path.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tinyddp::examples {

std::string ResolveUserPath(const std::string& path, const std::string& working_directory) {
  if (path.empty() || path[0] == '/') return path;
  if (absl::StartsWith(path, "~/")) {
    const char* home = std::getenv("HOME");
    if (home != nullptr && home[0] != '\0') return absl::StrCat(home, path.substr(1));
  }
  if (working_directory.empty()) return path;
  // "./x" and "x" both mean working_directory/x; keep the rest as typed (no normalisation of "..",
  // which would be wrong across symlinks).
  const std::string rest = absl::StartsWith(path, "./") ? path.substr(2) : path;
  if (rest.empty() || rest == ".") return working_directory;
  return absl::EndsWith(working_directory, "/") ? absl::StrCat(working_directory, rest)
                                                : absl::StrCat(working_directory, "/", rest);
}

std::string ResolveUserPath(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  return ResolveUserPath(path, wd != nullptr ? wd : "");
}

}  // namespace tinyddp::examples
