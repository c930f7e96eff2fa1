// The job's timeout: see job_timeout.h. Abseil parses durations; a bare number is seconds.
#include "dist/worker/job_timeout.h"

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
  if (flag_value.empty()) return env != nullptr && *env != '\0' ? ParseTimeout(env, kTimeoutEnv) : kDefaultJobTimeout;
  // A launcher hands its timeout to its workers in TINYDDP_TIMEOUT: say (once per machine) if the flag differs.
  absl::StatusOr<std::chrono::milliseconds> flag = ParseTimeout(flag_value, flag_name);
  const char* local_rank = std::getenv("LOCAL_RANK");
  if (flag.ok() && env != nullptr && ParseTimeout(env, kTimeoutEnv).value_or(*flag) != *flag &&
      (local_rank == nullptr || absl::string_view(local_rank) == "0")) {
    std::fprintf(stderr, "%.*s=%.*s differs from %s=%s (the launcher's): give both one timeout\n",
                 static_cast<int>(flag_name.size()), flag_name.data(), static_cast<int>(flag_value.size()),
                 flag_value.data(), kTimeoutEnv, env);
  }
  return flag;
}

std::string FormatTimeout(std::chrono::milliseconds timeout) {
  return absl::FormatDuration(absl::FromChrono(timeout));
}

}  // namespace tinyddp::dist
