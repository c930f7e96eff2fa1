// The job's timeout: see job_timeout.h. Abseil parses durations; a bare number is seconds.
#include "dist/launch/job_timeout.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace tinyddp::dist {

absl::StatusOr<std::chrono::milliseconds> ParseTimeout(absl::string_view text, absl::string_view source) {
  const absl::string_view value = absl::StripAsciiWhitespace(text);
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(value, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(value, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(source, "=", text,
                                                   ": expected seconds (30) or a duration with a unit (30s, 2m, "
                                                   "1h30m, 500ms)"));
  }
  if (d < absl::Milliseconds(1) || d > absl::FromChrono(kMaxJobTimeout)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, "=", text, ": must be between 1ms and 24h (every wait of the job is bounded by it)"));
  }
  return absl::ToChronoMilliseconds(d);
}

absl::StatusOr<std::chrono::milliseconds> ResolveJobTimeout(absl::string_view flag_value,
                                                            absl::string_view flag_name) {
  const char* env = std::getenv(kTimeoutEnv);
  const bool env_set = env != nullptr && *env != '\0';
  if (!flag_value.empty()) {
    // A launcher hands its timeout to its workers in TINYDDP_TIMEOUT: say when the program's flag differs.
    absl::StatusOr<std::chrono::milliseconds> flag = ParseTimeout(flag_value, flag_name), given = flag;
    if (env_set && flag.ok()) given = ParseTimeout(env, kTimeoutEnv);
    const char* local_rank = std::getenv("LOCAL_RANK");
    if (given.ok() && *given != *flag && (local_rank == nullptr || absl::string_view(local_rank) == "0")) {
      std::fprintf(stderr, "%s\n", absl::StrCat(flag_name, "=", flag_value, " differs from ", kTimeoutEnv, "=", env,
                                                " (the launcher's): this process waits ", FormatTimeout(*flag),
                                                ", its launcher ", FormatTimeout(*given), "; give both one timeout")
                                       .c_str());
    }
    return flag;
  }
  if (env_set) return ParseTimeout(env, kTimeoutEnv);
  return kDefaultJobTimeout;
}

std::string FormatTimeout(std::chrono::milliseconds timeout) {
  return absl::FormatDuration(absl::FromChrono(timeout));
}

}  // namespace tinyddp::dist
