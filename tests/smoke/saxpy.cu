// The smallest real kernel: y = a * x + y, one thread per element, grid-stride loop.
#include "tests/smoke/saxpy.h"

#include <cuda_runtime.h>

namespace tinyddp::smoke {
namespace {

__global__ void SaxpyKernel(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string Saxpy(float a, const std::vector<float>& x, std::vector<float>& y) {
  const int n = static_cast<int>(x.size());
  const size_t bytes = n * sizeof(float);
  float *dx = nullptr, *dy = nullptr;
  cudaError_t err = cudaMalloc(&dx, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dy, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    SaxpyKernel<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  return err == cudaSuccess ? "" : cudaGetErrorString(err);
}

}  // namespace tinyddp::smoke
