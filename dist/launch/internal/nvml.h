// Nvml: the few NVML queries `launch --check` needs (NVLink state and peers, PCIe path between GPUs,
// driver version), loaded with dlopen at run time. libnvidia-ml.so.1 ships with the NVIDIA driver, not
// the toolkit, so a binary must neither link it nor need its headers: the functions are declared here
// by hand and looked up by name. Machines without the driver simply get nullptr from Load().
#ifndef TINYDDP_DIST_LAUNCH_INTERNAL_NVML_H_
#define TINYDDP_DIST_LAUNCH_INTERNAL_NVML_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tinyddp::dist::internal {

class Nvml {
 public:
  /// Loads and initializes NVML; nullptr (with *why_not set) when the library or a GPU driver is absent.
  static std::unique_ptr<Nvml> Load(std::string* why_not);
  ~Nvml();

  /// "580.65.06", or "" when unknown.
  std::string DriverVersion();

  struct NvLink {
    std::string remote_bus_id;  // normalized, see NormalizeBusId
    bool to_switch = false;     // the link ends at an NVSwitch, not at a GPU
  };
  /// The active NVLinks of the GPU at this PCI bus id (empty without NVLink).
  absl::StatusOr<std::vector<NvLink>> ActiveLinks(const std::string& bus_id);
  /// The PCIe path between two GPUs in nvidia-smi's words: "PIX", "PXB", "PHB", "NODE", "SYS".
  absl::StatusOr<std::string> PathType(const std::string& bus_a, const std::string& bus_b);

 private:
  struct Api;
  explicit Nvml(void* handle);
  void* handle_;
  std::unique_ptr<Api> api_;
};

/// "0000:3B:00.0" and "00000000:3b:00.0" both become "0000:3b:00.0", so CUDA's and NVML's ids compare.
std::string NormalizeBusId(const std::string& bus_id);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_LAUNCH_INTERNAL_NVML_H_
