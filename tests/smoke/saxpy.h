// A one-kernel CUDA library that proves the build's GPU path end to end: nvcc compiles saxpy.cu
// through tools/cuda.bzl, and plain C++ calls it through this header (no cuda_runtime.h here).
#ifndef TINYDDP_TESTS_SMOKE_SAXPY_H_
#define TINYDDP_TESTS_SMOKE_SAXPY_H_

#include <string>
#include <vector>

namespace tinyddp::smoke {

/// Number of visible CUDA devices; 0 when there is no GPU or no driver.
int CudaDeviceCount();

/// Computes y = a * x + y on device 0 (copies in, launches the kernel, copies out).
/// Returns an empty string on success, else the CUDA error that stopped it.
std::string Saxpy(float a, const std::vector<float>& x, std::vector<float>& y);

}  // namespace tinyddp::smoke

#endif  // TINYDDP_TESTS_SMOKE_SAXPY_H_
