// ParseCommandLineFlags: every accepted spelling sets the Abseil flag, every mistake names the flag and
// the reason, and whatever follows the flags is handed back untouched.
#include "base/command_line.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int64_t, epochs, 3, "passes over the data");
ABSL_FLAG(double, lr, 0.1, "learning rate");
ABSL_FLAG(std::string, data_dir, "x", "where the data is");
ABSL_FLAG(bool, shuffle, true, "reshuffle every epoch");
ABSL_FLAG(bool, verbose, false, "say more");
ABSL_FLAG(int32_t, nproc_per_node, 1, "workers per machine");
ABSL_FLAG(int64_t, not_listed, 0, "defined, but not among the program's flags");

namespace tinyddp {
namespace {

const std::vector<FlagGroup> kFlags = {
    {"training", {"epochs", "lr", "shuffle", "verbose"}},
    {"job", {"data_dir", "nproc_per_node"}},
};

TEST(ParseCommandLineFlags, AcceptsEqualsSpaceSingleDashAndDashedNames) {
  auto parsed =
      ParseCommandLineFlags({"--epochs=7", "--lr", "0.025", "-data-dir=/tmp/d", "--nproc-per-node", "5"}, kFlags);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_epochs), 7);
  EXPECT_DOUBLE_EQ(absl::GetFlag(FLAGS_lr), 0.025);
  EXPECT_EQ(absl::GetFlag(FLAGS_data_dir), "/tmp/d");
  EXPECT_EQ(absl::GetFlag(FLAGS_nproc_per_node), 5);
  EXPECT_FALSE(parsed->help);
  EXPECT_TRUE(parsed->rest.empty());
}

TEST(ParseCommandLineFlags, BooleansTakeBareNegatedAndExplicitForms) {
  // Each from the default: --shuffle is on, --verbose off.
  for (const char* off : {"--noshuffle", "--shuffle=false", "--shuffle=0", "-shuffle=no"}) {
    ASSERT_TRUE(ParseCommandLineFlags({off}, kFlags).ok()) << off;
    EXPECT_FALSE(absl::GetFlag(FLAGS_shuffle)) << off;
  }
  for (const char* on : {"--verbose", "--verbose=true", "--verbose=1", "-verbose=YES"}) {
    ASSERT_TRUE(ParseCommandLineFlags({on}, kFlags).ok()) << on;
    EXPECT_TRUE(absl::GetFlag(FLAGS_verbose)) << on;
  }
}

TEST(ParseCommandLineFlags, EveryCallStartsFromTheDefaults) {
  ASSERT_TRUE(ParseCommandLineFlags({"--epochs=9", "--noshuffle", "--data_dir=/d"}, kFlags).ok());
  ASSERT_TRUE(ParseCommandLineFlags({"--lr=0.5"}, kFlags).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_epochs), 3);
  EXPECT_TRUE(absl::GetFlag(FLAGS_shuffle));
  EXPECT_EQ(absl::GetFlag(FLAGS_data_dir), "x");
  EXPECT_DOUBLE_EQ(absl::GetFlag(FLAGS_lr), 0.5);
}

TEST(ParseCommandLineFlags, UnknownFlagIsNamedEvenIfAnotherLibraryDefinesIt) {
  for (const std::string arg : {"--epoch=3", "--not_listed=2", "--nolr"}) {
    auto parsed = ParseCommandLineFlags({"--epochs=2", arg}, kFlags);
    ASSERT_FALSE(parsed.ok()) << arg;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string name = arg.substr(2, arg.find('=') - 2);
    EXPECT_EQ(parsed.status().message(), "unknown flag --" + name);
  }
  EXPECT_EQ(absl::GetFlag(FLAGS_not_listed), 0);
}

TEST(ParseCommandLineFlags, BadValuesSayWhichFlagAndWhy) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--epochs=abc"}, "--epochs=abc: expected an integer"},
      {{"--epochs=2.5"}, "--epochs=2.5: expected an integer"},
      {{"--nproc_per_node=99999999999"}, "--nproc_per_node=99999999999: expected an integer"},
      {{"--lr=fast"}, "--lr=fast: expected a number"},
      {{"--shuffle=maybe"}, "--shuffle=maybe: expected true or false"},
      {{"--lr"}, "--lr needs a value (--lr=VALUE)"},
  };
  for (const auto& [args, want] : cases) {
    auto parsed = ParseCommandLineFlags(args, kFlags);
    ASSERT_FALSE(parsed.ok()) << args[0];
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), want);
  }
}

TEST(ParseCommandLineFlags, StopsAtTheFirstArgumentThatIsNotAFlagAndAtDoubleDash) {
  auto program = ParseCommandLineFlags({"--epochs", "4", "./train", "--epochs=9", "--bogus"}, kFlags);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_epochs), 4) << "a flag after the program is the program's";
  EXPECT_EQ(program->rest, (std::vector<std::string>{"./train", "--epochs=9", "--bogus"}));

  auto dashed = ParseCommandLineFlags({"--noshuffle", "--", "--weird-name", "a"}, kFlags);
  ASSERT_TRUE(dashed.ok()) << dashed.status();
  EXPECT_EQ(dashed->rest, (std::vector<std::string>{"--weird-name", "a"}));
}

TEST(ParseCommandLineFlags, HelpStopsParsing) {
  for (const char* help : {"--help", "-help", "-h"}) {
    auto parsed = ParseCommandLineFlags({"--epochs=5", help, "--bogus"}, kFlags);
    ASSERT_TRUE(parsed.ok()) << help << ": " << parsed.status();
    EXPECT_TRUE(parsed->help);
  }
}

TEST(FlagsHelp, ListsEveryFlagUnderItsGroupWithHelpAndDefault) {
  const std::string help = FlagsHelp(kFlags);
  EXPECT_EQ(help,
            "training:\n"
            "  --epochs                 passes over the data [default: 3]\n"
            "  --lr                     learning rate [default: 0.1]\n"
            "  --shuffle                reshuffle every epoch [default: true]\n"
            "  --verbose                say more [default: false]\n"
            "\n"
            "job:\n"
            "  --data_dir               where the data is [default: \"x\"]\n"
            "  --nproc_per_node         workers per machine [default: 1]\n");
}

}  // namespace
}  // namespace tinyddp
