// UnknownVariableWarning: silent for known names and for other programs' variables, and a misspelled name
// is answered with the closest known one.
#include "dist/elastic/known_variables.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(UnknownVariableWarning, SaysNothingForKnownNamesAndOtherPrefixes) {
  for (const char* name : {"TINYDDP_TIMEOUT", "TINYDDP_NPROC", "TINYDDP_FLIGHT_RECORDER_DIR", "TINYDDP_STORE_SECRET",
                           "NCCL_DEBUG", "TINYDDP", "PATH", "tinyddp_timeout"}) {
    EXPECT_EQ(UnknownVariableWarning(name), "") << name;
  }
}

TEST(UnknownVariableWarning, NamesTheClosestKnownVariable) {
  EXPECT_EQ(UnknownVariableWarning("TINYDDP_TIMOUT"),
            "TINYDDP_TIMOUT is not a tinyddp variable; did you mean TINYDDP_TIMEOUT?");
  EXPECT_EQ(UnknownVariableWarning("TINYDDP_NPORC"),
            "TINYDDP_NPORC is not a tinyddp variable; did you mean TINYDDP_NPROC?");
  EXPECT_EQ(UnknownVariableWarning("TINYDDP_FLIGHTRECORDER_DIR"),
            "TINYDDP_FLIGHTRECORDER_DIR is not a tinyddp variable; did you mean TINYDDP_FLIGHT_RECORDER_DIR?");
  EXPECT_EQ(UnknownVariableWarning("TINYDDP_STORE_SECRETS"),
            "TINYDDP_STORE_SECRETS is not a tinyddp variable; did you mean TINYDDP_STORE_SECRET?");
}

TEST(UnknownVariableWarning, SuggestsNothingWhenNothingIsClose) {
  EXPECT_EQ(UnknownVariableWarning("TINYDDP_BATCH_SIZE"),
            "TINYDDP_BATCH_SIZE is not a tinyddp variable (docs/troubleshooting.md lists them)");
}

}  // namespace
}  // namespace tinyddp::dist
