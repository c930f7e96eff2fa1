// FlagParser: every accepted spelling sets the variable, and every mistake names the flag and the reason.
#include "examples/internal/flag_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

struct Vars {
  int64_t epochs = 3;
  double lr = 0.1;
  std::string dir = "x";
  bool shuffle = true;
  std::string optimizer = "sgd";
  std::vector<int64_t> hidden = {512, 512};
};

FlagParser Bind(Vars& v) {
  FlagParser p("prog");
  p.AddInt("epochs", &v.epochs, "epochs");
  p.AddDouble("lr", &v.lr, "learning rate");
  p.AddString("data_dir", &v.dir, "data");
  p.AddBool("shuffle", &v.shuffle, "shuffle");
  p.AddChoice("optimizer", &v.optimizer, {"sgd", "adamw"}, "optimizer");
  p.AddIntList("hidden", &v.hidden, "widths");
  return p;
}

absl::Status ParseInto(Vars& v, const std::vector<std::string>& args) {
  FlagParser p = Bind(v);
  bool help = false;
  return p.Parse(args, &help);
}

TEST(FlagParser, AcceptsEqualsSpaceSingleDashAndDashedNames) {
  Vars v;
  ASSERT_TRUE(ParseInto(v, {"--epochs=7", "--lr", "0.025", "-data-dir=/tmp/d", "--hidden=33,7,129"}).ok());
  EXPECT_EQ(v.epochs, 7);
  EXPECT_DOUBLE_EQ(v.lr, 0.025);
  EXPECT_EQ(v.dir, "/tmp/d");
  EXPECT_EQ(v.hidden, (std::vector<int64_t>{33, 7, 129}));
}

TEST(FlagParser, BooleansTakeBareNegatedAndExplicitForms) {
  Vars v;
  ASSERT_TRUE(ParseInto(v, {"--noshuffle"}).ok());
  EXPECT_FALSE(v.shuffle);
  ASSERT_TRUE(ParseInto(v, {"--shuffle"}).ok());
  EXPECT_TRUE(v.shuffle);
  ASSERT_TRUE(ParseInto(v, {"--shuffle=false"}).ok());
  EXPECT_FALSE(v.shuffle);
  ASSERT_TRUE(ParseInto(v, {"--shuffle=YES"}).ok());
  EXPECT_TRUE(v.shuffle);
}

TEST(FlagParser, UnknownFlagIsNamed) {
  Vars v;
  absl::Status s = ParseInto(v, {"--epochs=2", "--epoch=3"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown flag --epoch"), std::string::npos) << s;
}

TEST(FlagParser, BadValuesSayWhichFlagAndWhy) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--epochs=abc"}, "--epochs=abc: expected an integer"},
      {{"--epochs=2.5"}, "--epochs=2.5: expected an integer"},
      {{"--lr=fast"}, "--lr=fast: expected a finite number"},
      {{"--lr=nan"}, "--lr=nan: expected a finite number"},
      {{"--shuffle=maybe"}, "--shuffle=maybe: expected true or false"},
      {{"--optimizer=adam"}, "--optimizer=adam: expected one of sgd, adamw"},
      {{"--hidden=512,,3"}, "--hidden=512,,3: expected comma-separated positive integers"},
      {{"--hidden=-4"}, "--hidden=-4: expected comma-separated positive integers"},
      {{"--lr"}, "--lr needs a value"},
      {{"stray"}, "unexpected argument \"stray\""},
  };
  for (const Case& c : cases) {
    Vars v;
    absl::Status s = ParseInto(v, c.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << "got: " << s.message() << "\nwant: " << c.expected;
  }
}

TEST(FlagParser, HelpStopsParsingAndUsageListsDefaults) {
  Vars v;
  FlagParser p = Bind(v);
  bool help = false;
  ASSERT_TRUE(p.Parse({"--help", "--bogus"}, &help).ok());
  EXPECT_TRUE(help);
  const std::string usage = p.Usage();
  EXPECT_NE(usage.find("--epochs"), std::string::npos);
  EXPECT_NE(usage.find("[default: 3]"), std::string::npos);
  EXPECT_NE(usage.find("[default: \"512,512\"]"), std::string::npos);
  EXPECT_NE(usage.find("(sgd|adamw)"), std::string::npos);
}

TEST(FlagParser, WasSetTellsExplicitValuesFromDefaults) {
  Vars v;
  FlagParser p = Bind(v);
  bool help = false;
  ASSERT_TRUE(p.Parse({"--lr=0.1", "--noshuffle"}, &help).ok());
  EXPECT_TRUE(p.WasSet("lr"));  // set, even to its default value
  EXPECT_TRUE(p.WasSet("shuffle"));
  EXPECT_FALSE(p.WasSet("epochs"));
}

}  // namespace
}  // namespace tinyddp::examples
