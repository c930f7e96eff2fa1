// SystemReport on whatever machine runs the test: it never fails, and says what it found. On the GPU
// machine it must list every GPU and, with two or more, a link matrix with a row per GPU.
#include "dist/launch/gpu_report.h"

#include <string>

#include "gtest/gtest.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {
namespace {

TEST(SystemReport, DescribesTheBuildAndEveryVisibleGpu) {
  const std::string report = SystemReport();
  std::printf("%s", report.c_str());  // the test log then shows the machine it ran on
  if (!cuda::BuiltWithCuda()) {
    EXPECT_NE(report.find("CPU-only build"), std::string::npos) << report;
    return;
  }
  EXPECT_NE(report.find("CUDA runtime:"), std::string::npos) << report;
  EXPECT_NE(report.find("NCCL:"), std::string::npos) << report;
  const int gpus = cuda::DeviceCount();
  if (gpus == 0) {
    EXPECT_NE(report.find("no GPU"), std::string::npos) << report;
    return;
  }
  for (int d = 0; d < gpus; ++d) {
    EXPECT_NE(report.find("  GPU" + std::to_string(d) + "  "), std::string::npos) << report;
  }
  if (gpus >= 2) {
    EXPECT_NE(report.find("Links between GPUs"), std::string::npos) << report;
    EXPECT_NE(report.find("Peer-to-peer access"), std::string::npos) << report;
  }
}

}  // namespace
}  // namespace tinyddp::dist
