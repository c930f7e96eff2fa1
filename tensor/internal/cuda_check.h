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
    // CUDA graphs (tensor/cuda_graph.h; docs/cuda_graphs.md lists what a captured step may not do).
    case cudaErrorStreamCaptureUnsupported:
      return "this call cannot be recorded into a CUDA graph (a host wait, an event query, a free), and this "
             "thread is capturing one: a captured step must only enqueue work.";
    case cudaErrorStreamCaptureInvalidated:
      return "the CUDA graph being captured was invalidated by an earlier call that cannot be recorded (a host "
             "wait, an event query): look for it in the captured step.";
    case cudaErrorStreamCaptureImplicit:
      return "the legacy default stream was used while a CUDA graph was being captured: give the step a stream "
             "of its own (Stream::Create + Stream::SetCurrent).";
    case cudaErrorCapturedEvent:
      return "an event recorded inside a CUDA graph capture was queried or waited on from the host: such an "
             "event only exists inside the graph.";
    case cudaErrorStreamCaptureUnjoined:
      return "a stream that joined the CUDA graph capture (through an event wait) was not joined back into the "
             "capturing stream before the capture ended: the capturing stream must wait for its last work.";
    case cudaErrorStreamCaptureWrongThread:
      return "a CUDA graph capture must end on the thread that began it.";
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

/// Stops the program with a message when `stream` is recording a CUDA graph (tensor/cuda_graph.h) and
/// `what` (a host wait or a host read) is asked of it: there is nothing to wait for until the graph is
/// replayed, so such a call inside a captured step is always a mistake.
inline void CheckNotCapturing(cudaStream_t stream, const char* what) {
  if (stream == nullptr) return;  // the legacy stream is never captured (CudaGraph refuses it)
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // a question about capture is not worth stopping for; the call itself will check
    return;
  }
  if (status == cudaStreamCaptureStatusNone) return;
  std::fprintf(stderr,
               "tinyddp: %s on a stream that is recording a CUDA graph (tensor/cuda_graph.h). A captured step "
               "must only enqueue work: nothing in it may wait for the GPU or read a tensor on the host "
               "(Tensor::Item, ToVector, Work::Wait, Stream::Synchronize).\n"
               "  Hint: keep the value on the device and read it after the step (ddp_mlp's loss window does), "
               "or run this step eagerly; docs/cuda_graphs.md lists what cannot be captured.\n",
               what);
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
