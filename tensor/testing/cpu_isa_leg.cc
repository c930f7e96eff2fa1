// Linked into every leg of a test that runs once per CPU kernel set (tools/cpu_isa_legs.bzl): the leg's
// TINYDDP_CPU_ISA caps the kernels of this process and of every process it starts (they inherit the
// variable). A cap never raises the kernels above what the CPU runs, so a leg this CPU cannot run would
// silently repeat a narrower one: instead, every test of that leg is skipped, saying which CPU runs it.
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tensor/cpu_isa.h"

namespace tinyddp {
namespace {

class CpuIsaLeg : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* leg = std::getenv("TINYDDP_CPU_ISA");
    ASSERT_NE(leg, nullptr) << "a CPU kernel leg runs with TINYDDP_CPU_ISA set (tools/cpu_isa_legs.bzl)";
    absl::StatusOr<CpuIsa> wanted = ParseCpuIsa(leg);
    ASSERT_TRUE(wanted.ok()) << wanted.status();
    if (DetectedCpuIsa() < *wanted) {
      GTEST_SKIP() << "the " << leg << " leg needs a CPU with " << leg << "; this one runs "
                   << CpuIsaName(DetectedCpuIsa()) << " (run this leg on one that has it, e.g. through "
                   << "tools/gpu_bundle.sh on the GPU machine's host)";
    }
    std::printf("CPU kernel leg: %s\n", CpuIsaSummary().c_str());
  }
};

const ::testing::Environment* const kLeg = ::testing::AddGlobalTestEnvironment(new CpuIsaLeg);

}  // namespace
}  // namespace tinyddp
