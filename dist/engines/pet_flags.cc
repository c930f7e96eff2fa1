// torchrun's PET_* variables as launch's flags: see pet_flags.h.
#include "dist/engines/pet_flags.h"

#include <optional>
#include <tuple>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tinyddp::dist {

absl::StatusOr<std::vector<std::string>> LaunchFlagsFromEnvironment(const EnvVars& vars) {
  std::vector<std::string> flags;
  if (absl::c_none_of(vars, [](const auto& kv) { return absl::StartsWith(kv.first, "PET_"); })) return flags;
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() || it->second.empty() ? std::nullopt : std::optional<std::string>(it->second);
  };
  std::optional<std::string> nnodes = get("PET_NNODES");
  if (nnodes) {
    std::pair<std::string, std::string> range = absl::StrSplit(*nnodes, absl::MaxSplits(':', 1));
    if (!range.second.empty() && range.second != range.first) {
      return absl::InvalidArgumentError(absl::StrCat("PET_NNODES=", *nnodes, " is an elastic range; tinyddp's jobs "
                                                     "have a fixed number of nodes (as many minimum as maximum)"));
    }
    nnodes = range.first;
  }
  // The store: MASTER_ADDR/PORT over PET_MASTER_ADDR/PORT over PET_RDZV_ENDPOINT (host:port).
  std::optional<std::string> addr = get("MASTER_ADDR"), port = get("MASTER_PORT");
  if (!addr) addr = get("PET_MASTER_ADDR");
  if (!port) port = get("PET_MASTER_PORT");
  if (auto endpoint = get("PET_RDZV_ENDPOINT")) {
    const size_t colon = endpoint->rfind(':');
    if (!addr) addr = endpoint->substr(0, colon);
    if (!port && colon != std::string::npos) port = endpoint->substr(colon + 1);
  }
  // Each as launch's flag; integers are checked here, so that an error names the variable.
  const std::tuple<const char*, const char*, std::optional<std::string>, bool> fields[] = {
      {"PET_NNODES", "--nnodes", nnodes, true},
      {"PET_NODE_RANK", "--node_rank", get("PET_NODE_RANK"), true},
      {"PET_NPROC_PER_NODE", "--nproc_per_node", get("PET_NPROC_PER_NODE"), false},
      {"MASTER_ADDR or PET_MASTER_ADDR", "--master_addr", addr, false},
      {"MASTER_PORT or PET_MASTER_PORT", "--master_port", port, true},
      {"PET_MAX_RESTARTS", "--max_restarts", get("PET_MAX_RESTARTS"), true},
  };
  for (const auto& [var, flag, value, integer] : fields) {
    int n = 0;
    if (!value) continue;
    if (integer && !absl::SimpleAtoi(*value, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(var, "='", *value, "' is not an integer (launch reads it as ",
                                                     flag, ", as torchrun does)"));
    }
    flags.push_back(absl::StrCat(flag, "=", *value));
  }
  const std::string standalone = absl::AsciiStrToLower(get("PET_STANDALONE").value_or(""));
  if (standalone == "1" || standalone == "true") flags.push_back("--standalone");
  return flags;
}

}  // namespace tinyddp::dist
