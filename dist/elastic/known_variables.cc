// Known variables: see known_variables.h. The closest name is the one fewest one-letter edits away.
#include "dist/elastic/known_variables.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace tinyddp::dist {
namespace {

// The list: a new variable joins it here. The second line's are set for workers, by the sample job
// scripts (examples/cluster/) or by tests.
constexpr absl::string_view kKnown[] = {
    "TINYDDP_NPROC", "TINYDDP_TIMEOUT", "TINYDDP_FAULT", "TINYDDP_STORE_SECRET", "TINYDDP_STORE_MAX_BYTES",
    "TINYDDP_DISTRIBUTED_DEBUG", "TINYDDP_FLIGHT_RECORDER_DIR", "TINYDDP_COPY_ENGINE_ALLREDUCE",
    "TINYDDP_COPY_ENGINE_MIN_BYTES", "TINYDDP_CPU_ISA", "TINYDDP_PROGRAM", "TINYDDP_CHECKPOINT_DIR",
    "TINYDDP_RESTART_COUNT", "TINYDDP_ERROR_FILE", "TINYDDP_LAUNCHER_STORE", "TINYDDP_TEST_RANKS_CALL",
    "TINYDDP_STORE_SERVER_CHILD", "TINYDDP_STORE_SERVER_CHILD_SECRET", "TINYDDP_STORE_SERVER_CHILD_SPARE_FDS",
    "TINYDDP_IN_PLACE_REPLACEMENT", "TINYDDP_IN_PLACE_REPLACEMENTS"};

// Levenshtein distance (insertions, deletions, substitutions), one row of the table at a time.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0]++;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string UnknownVariableWarning(absl::string_view name) {
  if (!absl::StartsWith(name, "TINYDDP_")) return "";
  absl::string_view closest = kKnown[0];
  for (absl::string_view known : kKnown) {
    if (known == name) return "";
    if (EditDistance(name, known) < EditDistance(name, closest)) closest = known;
  }
  return absl::StrCat(name, " is not a tinyddp variable",
                      EditDistance(name, closest) <= 3 ? absl::StrCat("; did you mean ", closest, "?")
                                                       : " (docs/troubleshooting.md lists them)");
}

void WarnAboutUnknownVariables(const char* prefix) {
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const absl::string_view variable(*entry);
    const std::string warning = UnknownVariableWarning(variable.substr(0, variable.find('=')));
    if (!warning.empty()) std::fprintf(stderr, "%s%s\n", prefix, warning.c_str());
  }
}

}  // namespace tinyddp::dist
