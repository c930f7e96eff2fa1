// The CUDA devices as plain C++: how many there are, which one this thread uses, and raw memory copies.
// No CUDA header leaks from here, so CPU-only readers and builds include it freely: in a build without
// the CUDA toolkit DeviceCount() is 0 and the rest stop with "tinyddp was built without CUDA".
#ifndef TINYDDP_TENSOR_CUDA_DEVICE_H_
#define TINYDDP_TENSOR_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tinyddp::cuda {

/// True when this binary was compiled with the CUDA toolkit.
bool BuiltWithCuda();
/// Number of visible GPUs; 0 without a driver, a GPU, or a CUDA build. Never fails.
int DeviceCount();
/// Makes `device` current for the calling thread (cudaSetDevice).
void SetDevice(int device);
int CurrentDevice();
/// "NVIDIA H200, 139 GiB, sm_90" for logs.
std::string DeviceDescription(int device);
/// Total memory of GPU `device` in bytes (what cudaGetDeviceProperties reports); 0 without such a device.
int64_t DeviceTotalMemory(int device);
/// How many SMs cuBLASLt plans each later product for (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET); 0, the
/// default, means all of them. A bench knob (`ddp_step_bench --gemm_sm_count`): fewer SMs for the GEMMs leaves
/// some to kernels on another stream (the optimizer inside backward). Products already planned keep theirs,
/// so set it before the first one.
void SetGemmSmCountTarget(int sms);
int GemmSmCountTarget();
/// Blocks until every stream on the current device is idle. For tests and teardown only: the
/// training step never calls it (see docs/design.md, "Streams").
void DeviceSynchronize();

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
/// Copies on `stream` (an opaque cudaStream_t; nullptr = the current stream of the current device).
/// Asynchronous for pinned host memory and device-to-device; synchronous otherwise, as in CUDA.
void MemcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream = nullptr);

}  // namespace tinyddp::cuda

// Stops the program with file, line, the CUDA error string and a hint when a CUDA call fails.
// Defined in .cc/.cu files that include cuda_runtime.h (tensor/internal/cuda_check.h).

#endif  // TINYDDP_TENSOR_CUDA_DEVICE_H_
