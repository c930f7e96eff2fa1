// Proves the GPU libraries link and initialise: a cuBLAS handle runs a real SGEMM, and NCCL builds a
// communicator over every visible GPU from one process and all_reduces a buffer on each.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "gtest/gtest.h"

namespace {

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

TEST(CudaSmoke, CublasSgemmComputesAProduct) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  // Column-major 3x2 * 2x3 with distinct entries.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  float *da, *db, *dc;
  ASSERT_EQ(cudaMalloc(&da, 6 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, 6 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, 9 * sizeof(float)), cudaSuccess);
  cudaMemcpy(da, a.data(), 6 * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), 6 * sizeof(float), cudaMemcpyHostToDevice);
  const float one = 1.f, zero = 0.f;
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 3, 3, 2, &one, da, 3, db, 2, &zero, dc, 3),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> c(9);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, 9 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_FLOAT_EQ(c[i + 3 * j], a[i] * b[2 * j] + a[i + 3] * b[2 * j + 1]) << i << "," << j;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cublasDestroy(handle);
}

TEST(CudaSmoke, NcclAllReduceAcrossAllVisibleGpus) {
  const int n = DeviceCount();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  printf("NCCL version %d, %d GPU(s)\n", version, n);
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devs(n);
  for (int i = 0; i < n; ++i) devs[i] = i;
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess);
  const int count = 1000 + 7;
  std::vector<float*> bufs(n);
  std::vector<cudaStream_t> streams(n);
  for (int i = 0; i < n; ++i) {
    cudaSetDevice(i);
    ASSERT_EQ(cudaMalloc(&bufs[i], count * sizeof(float)), cudaSuccess);
    std::vector<float> h(count);
    for (int k = 0; k < count; ++k) h[k] = (i + 1) * 0.5f + k;
    cudaMemcpy(bufs[i], h.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    cudaStreamCreate(&streams[i]);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(ncclAllReduce(bufs[i], bufs[i], count, ncclFloat, ncclSum, comms[i], streams[i]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  float rank_sum = 0;
  for (int i = 0; i < n; ++i) rank_sum += (i + 1) * 0.5f;
  for (int i = 0; i < n; ++i) {
    cudaSetDevice(i);
    ASSERT_EQ(cudaStreamSynchronize(streams[i]), cudaSuccess);
    std::vector<float> h(count);
    cudaMemcpy(h.data(), bufs[i], count * sizeof(float), cudaMemcpyDeviceToHost);
    for (int k = 0; k < count; ++k) ASSERT_FLOAT_EQ(h[k], rank_sum + n * k) << "gpu " << i << " elem " << k;
    cudaFree(bufs[i]);
    cudaStreamDestroy(streams[i]);
    ncclCommDestroy(comms[i]);
  }
}

}  // namespace
