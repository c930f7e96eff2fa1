// ResolveNprocPerNode: torchrun's meanings of --nproc_per_node (a number, gpu, cpu, auto).
#include "dist/launch/launch_options.h"

#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(ResolveNprocPerNode, FollowsTorchrunsMeanings) {
  EXPECT_EQ(*ResolveNprocPerNode("gpu", 8, 96), 8);
  EXPECT_EQ(*ResolveNprocPerNode("cpu", 8, 96), 96);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 96), 8);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 0, 3), 3);
  EXPECT_EQ(*ResolveNprocPerNode("5", 0, 3), 5);
  auto no_gpu = ResolveNprocPerNode("gpu", 0, 3);
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_NE(no_gpu.status().message().find("no GPU"), std::string::npos);
  EXPECT_FALSE(ResolveNprocPerNode("0", 1, 1).ok());
  EXPECT_FALSE(ResolveNprocPerNode("two", 1, 1).ok());
  EXPECT_GE(UsableCpuCount(), 1);
}

}  // namespace
}  // namespace tinyddp::dist
