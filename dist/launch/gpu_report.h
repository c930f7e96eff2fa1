// SystemReport: what `launch --check` prints, the first things to ask when a multi-GPU job misbehaves:
// CUDA driver and runtime versions, NCCL's version, every GPU (name, memory, compute capability, PCI
// address), and between every pair of GPUs whether they reach each other peer-to-peer and over how many
// NVLinks (the matrix nvidia-smi topo -m prints). Built from gpu_report_cuda.cc with the CUDA toolkit,
// from gpu_report_stub.cc without it.
#ifndef TINYDDP_DIST_LAUNCH_GPU_REPORT_H_
#define TINYDDP_DIST_LAUNCH_GPU_REPORT_H_

#include <string>

namespace tinyddp::dist {

/// The report as text, many lines. Never fails: whatever cannot be queried (no driver, no GPU, no NVML)
/// is reported as such. Safe to call on machines without a GPU.
std::string SystemReport();

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_GPU_REPORT_H_
