// CUDA_CHECK, CUBLAS_CHECK and CUDA_LAUNCH_CHECK: every CUDA and cuBLAS call in tinyddp goes through
// one of these, so a failure stops the program right where it happened, with the file, the line, the
// call, CUDA's own error string and a hint about the usual cause. Internal to tensor/: included by the
// CUDA runtime layer (cuda_rt_*.cc) and the kernels (cuda_*.cu), never by a public header.
#ifndef TINYDDP_TENSOR_INTERNAL_CUDA_CHECK_H_
#define TINYDDP_TENSOR_INTERNAL_CUDA_CHECK_H_

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace tinyddp::cuda::internal {

/// What a user should look at first for a given CUDA error. Errors a kernel raises surface at the next
/// CUDA call, which is why the hints mention kernels even when the failing line is a memcpy.
inline const char* CudaErrorHint(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return "out of GPU memory: is another process using the GPU (nvidia-smi)? Try a smaller batch.";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return "no usable GPU: check nvidia-smi, CUDA_VISIBLE_DEVICES and that the driver is new enough "
             "for this CUDA toolkit.";
    case cudaErrorDevicesUnavailable:
      return "the GPU is busy in exclusive mode: is another process using it?";
    case cudaErrorIllegalAddress:
      return "a kernel read or wrote out of bounds; rerun under compute-sanitizer to find it.";
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorIllegalInstruction:
      return "a kernel stopped itself: look above for its message (e.g. an index or label out of range).";
    case cudaErrorInvalidResourceHandle:
      return "a stream or event used on the wrong device, or after it was destroyed.";
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice:
      return "the kernels were not built for this GPU: rebuild with --//tools:cuda_archs=<sm>.";
    case cudaErrorLaunchOutOfResources:
      return "a kernel asked for too many registers or threads for this GPU.";
    default:
      return "is another process using the GPU? out of memory? a bad pointer from an earlier kernel?";
  }
}

[[noreturn]] inline void CudaFail(cudaError_t err, const char* call, const char* file, int line) {
  std::fprintf(stderr, "tinyddp: CUDA error at %s:%d in %s: %s (%s).\n  Hint: %s\n", file, line, call,
               cudaGetErrorString(err), cudaGetErrorName(err), CudaErrorHint(err));
  std::fflush(stderr);
  std::abort();
}

inline void CheckCuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) CudaFail(err, call, file, line);
}

inline const char* CublasHint(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLAS could not start: is a GPU visible, and is libcublas from the same CUDA version?";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "out of GPU memory: is another process using the GPU?";
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "a shape, leading dimension or alignment cuBLAS does not accept (a tinyddp bug: please report).";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU failed to run the kernel: an earlier kernel may have corrupted memory.";
    default:
      return "is another process using the GPU? out of memory?";
  }
}

inline void CheckCublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "tinyddp: cuBLAS error at %s:%d in %s: %s (status %d).\n  Hint: %s\n", file, line, call,
               cublasGetStatusString(status), static_cast<int>(status), CublasHint(status));
  std::fflush(stderr);
  std::abort();
}

}  // namespace tinyddp::cuda::internal

/// Stops the program with file, line, the call, the CUDA error string and a hint unless `expr` succeeds.
#define CUDA_CHECK(expr) ::tinyddp::cuda::internal::CheckCuda((expr), #expr, __FILE__, __LINE__)

/// The same for a cuBLAS or cuBLASLt call (both return cublasStatus_t).
#define CUBLAS_CHECK(expr) ::tinyddp::cuda::internal::CheckCublas((expr), #expr, __FILE__, __LINE__)

/// After a <<<...>>> launch: catches a bad launch configuration at once. It does not wait for the kernel,
/// so errors raised while the kernel runs surface at a later CUDA_CHECK (see the hints above).
#define CUDA_LAUNCH_CHECK() \
  ::tinyddp::cuda::internal::CheckCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

#endif  // TINYDDP_TENSOR_INTERNAL_CUDA_CHECK_H_
