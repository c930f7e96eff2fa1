// The main() of every leg of a test that runs once per CPU kernel set (tools/cpu_isa_legs.bzl). The leg's
// TINYDDP_CPU_ISA caps the kernels of this process and of every process it starts (they inherit the
// variable). A cap never raises the kernels above what the CPU runs, so a leg this CPU cannot run would
// silently repeat a narrower one and pass for the wrong reason. Instead, such a leg runs one case,
// CpuIsaLeg.NotOnThisCpu, which skips and says which CPU runs it: the report shows a skip, not a pass.
// (A gtest environment that skips would report every case as passed: gtest 1.12 counts them completed.)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tensor/cpu_isa.h"

namespace tinyddp {
namespace {

// The widest kernel set this CPU runs; TINYDDP_CPU_ISA_LEG_PRETEND (test of this file only:
// tools/cpu_isa_legs_test.sh) makes it look narrower, so the skip is checked on any CPU.
CpuIsa ThisCpu() {
  const char* pretend = std::getenv("TINYDDP_CPU_ISA_LEG_PRETEND");
  absl::StatusOr<CpuIsa> narrower = ParseCpuIsa(pretend == nullptr ? "" : pretend);
  return narrower.ok() && *narrower < DetectedCpuIsa() ? *narrower : DetectedCpuIsa();
}

// Why this leg cannot run here, or "" when it can.
std::string WhyNotHere() {
  const char* leg = std::getenv("TINYDDP_CPU_ISA");
  if (leg == nullptr) return "";  // built as a leg but run by hand without one: whatever this CPU picks
  absl::StatusOr<CpuIsa> wanted = ParseCpuIsa(leg);
  if (!wanted.ok() || ThisCpu() >= *wanted) return "";  // a bad value fails in the first kernel call
  return std::string("the ") + leg + " leg needs a CPU that runs " + leg + "; this one runs " +
         CpuIsaName(ThisCpu()) + " (run the leg on a CPU that has it, e.g. the GPU machine's host through "
         "tools/gpu_bundle.sh)";
}

class NotOnThisCpu : public ::testing::Test {
 public:
  explicit NotOnThisCpu(std::string why) : why_(std::move(why)) {}
  void TestBody() override { GTEST_SKIP() << why_; }

 private:
  std::string why_;
};

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string why = tinyddp::WhyNotHere();
  if (!why.empty()) {
    ::testing::RegisterTest("CpuIsaLeg", "NotOnThisCpu", nullptr, nullptr, __FILE__, __LINE__,
                            [why]() -> ::testing::Test* { return new tinyddp::NotOnThisCpu(why); });
    ::testing::GTEST_FLAG(filter) = "CpuIsaLeg.NotOnThisCpu";
  } else if (std::getenv("TINYDDP_CPU_ISA") != nullptr) {
    std::printf("CPU kernel leg: %s\n", tinyddp::CpuIsaSummary().c_str());
  }
  return RUN_ALL_TESTS();
}
