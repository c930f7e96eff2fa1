// ncclCommShrink on two GPUs of one process: the communicator of both, rank 1 lost, the survivor's child
// communicator of one rank all_reduces. Needs two GPUs; skips saying so otherwise.
#include "dist/elastic/in_place/nccl_shrink.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "gtest/gtest.h"

namespace tinyddp::dist::in_place {
namespace {

TEST(NcclShrink, TheSurvivorOfTwoGetsAOneRankCommunicatorThatAllReduces) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) {
    GTEST_SKIP() << "ncclCommShrink needs 2 GPUs to have a rank to lose; " << gpus << " visible here";
  }
  int devices[2] = {0, 1};
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, devices), ncclSuccess);
  // Rank 1 is "lost": only rank 0 shrinks (ncclCommShrink is collective over the survivors).
  cudaSetDevice(0);
  absl::StatusOr<ncclComm_t> child = ShrinkNcclCommunicator(comms[0], {1}, /*abort=*/true);
  ASSERT_TRUE(child.ok()) << child.status();
  int count = 0;
  ASSERT_EQ(ncclCommCount(*child, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  float* data = nullptr;
  ASSERT_EQ(cudaMalloc(&data, 4 * sizeof(float)), cudaSuccess);
  const std::vector<float> host = {1.5f, -2.0f, 3.25f, 7.0f};
  cudaMemcpy(data, host.data(), sizeof(float) * 4, cudaMemcpyHostToDevice);
  ASSERT_EQ(ncclAllReduce(data, data, 4, ncclFloat32, ncclSum, *child, nullptr), ncclSuccess);
  std::vector<float> back(4);
  cudaMemcpy(back.data(), data, sizeof(float) * 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(back, host);  // one rank: the sum is its own values
  cudaFree(data);
  ncclCommDestroy(*child);
  ncclCommAbort(comms[0]);
  ncclCommAbort(comms[1]);
}

}  // namespace
}  // namespace tinyddp::dist::in_place
