// tensor/cuda_device.h with the CUDA runtime: device count and selection, descriptions, raw copies.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"
#include "tensor/cuda_device.h"
#include "tensor/internal/cuda_check.h"
#include "tensor/internal/cuda_context.h"

namespace tinyddp::cuda {

bool BuiltWithCuda() { return true; }

int DeviceCount() {
  // Asked once: the set of visible devices cannot change while the process runs (CUDA_VISIBLE_DEVICES
  // is read at initialisation), and this sits on paths that must stay cheap.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no GPU: clear the error so later calls do not see it
      return 0;
    }
    return n;
  }();
  return count;
}

void SetDevice(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    std::fprintf(stderr,
                 "tinyddp: SetDevice(%d): only %d CUDA device(s) are visible.\n"
                 "  Hint: check CUDA_VISIBLE_DEVICES and nvidia-smi; one rank per GPU means local_rank < "
                 "GPU count.\n",
                 device, count);
    std::abort();
  }
  CUDA_CHECK(cudaSetDevice(device));
}

int CurrentDevice() {
  if (DeviceCount() == 0) return 0;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

std::string DeviceDescription(int device) {
  if (device < 0 || device >= DeviceCount()) return absl::StrFormat("no CUDA device %d", device);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return absl::StrFormat("%s, %d GiB, sm_%d%d", prop.name, static_cast<int>(prop.totalGlobalMem >> 30), prop.major,
                         prop.minor);
}

namespace {
std::atomic<int> gemm_sm_count_target{0};
}  // namespace

void SetGemmSmCountTarget(int sms) { gemm_sm_count_target.store(sms < 0 ? 0 : sms); }
int GemmSmCountTarget() { return gemm_sm_count_target.load(); }

int64_t DeviceTotalMemory(int device) {
  if (device < 0 || device >= DeviceCount()) return 0;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return static_cast<int64_t>(prop.totalGlobalMem);
}

void DeviceSynchronize() {
  if (DeviceCount() == 0) return;
  CUDA_CHECK(cudaDeviceSynchronize());
}

void MemcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) {
  if (bytes == 0) return;
  cudaMemcpyKind cuda_kind = cudaMemcpyDeviceToDevice;
  switch (kind) {
    case CopyKind::kHostToDevice:
      cuda_kind = cudaMemcpyHostToDevice;
      break;
    case CopyKind::kDeviceToHost:
      cuda_kind = cudaMemcpyDeviceToHost;
      break;
    case CopyKind::kDeviceToDevice:
      cuda_kind = cudaMemcpyDeviceToDevice;
      break;
  }
  cudaStream_t s =
      stream != nullptr ? static_cast<cudaStream_t>(stream) : internal::CurrentStreamHandle(CurrentDevice());
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cuda_kind, s));
}

}  // namespace tinyddp::cuda
