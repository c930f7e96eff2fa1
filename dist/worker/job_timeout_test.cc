// The job timeout's spellings, its bounds, and which source wins: the flag, then TINYDDP_TIMEOUT, then 300 s.
#include "dist/worker/job_timeout.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using std::chrono::milliseconds;

TEST(JobTimeout, ReadsSecondsAndDurationsWithUnits) {
  const std::pair<const char*, milliseconds> cases[] = {
      {"30", milliseconds(30000)},  {"30s", milliseconds(30000)},   {"2m", milliseconds(120000)},
      {"1.5s", milliseconds(1500)}, {"250ms", milliseconds(250)},   {"1h30m", milliseconds(5400000)},
      {" 20s ", milliseconds(20000)}, {"0.5", milliseconds(500)},
  };
  for (const auto& [text, want] : cases) {
    auto got = ParseTimeout(text, "--timeout");
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(got->count(), want.count()) << text;
  }
  EXPECT_EQ(FormatTimeout(milliseconds(20000)), "20s");
  EXPECT_EQ(FormatTimeout(milliseconds(90000)), "1m30s");
}

TEST(JobTimeout, RefusesNonsenseZeroNegativeAndForeverNamingTheSource) {
  for (const char* text : {"soon", "", "0", "0s", "-5s", "25h", "inf", "5 minutes"}) {
    auto got = ParseTimeout(text, "TINYDDP_TIMEOUT");
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_NE(got.status().message().find(std::string("TINYDDP_TIMEOUT=") + text), absl::string_view::npos)
        << got.status();
  }
}

TEST(JobTimeout, TheFlagWinsOverTheVariableWhichWinsOverTheDefault) {
  ::unsetenv(kTimeoutEnv);
  EXPECT_EQ(ResolveJobTimeout("")->count(), 300000);
  ::setenv(kTimeoutEnv, "45s", 1);
  EXPECT_EQ(ResolveJobTimeout("")->count(), 45000);
  EXPECT_EQ(ResolveJobTimeout("20s")->count(), 20000);
  ::setenv(kTimeoutEnv, "forever", 1);
  EXPECT_FALSE(ResolveJobTimeout("").ok()) << "a bad variable is an error, not the default";
  EXPECT_EQ(ResolveJobTimeout("2m")->count(), 120000) << "unless the flag makes it irrelevant";
  ::unsetenv(kTimeoutEnv);
}

}  // namespace
}  // namespace tinyddp::dist
