// SystemReport with CUDA (see gpu_report.h): the CUDA runtime for versions, devices and peer access,
// NCCL for its version, and NVML (dlopen'ed, internal/nvml.h) for NVLinks and PCIe paths.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dist/launch/gpu_report.h"
#include "dist/launch/internal/nvml.h"

namespace tinyddp::dist {
namespace {

std::string CudaVersion(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

struct Gpu {
  std::string name, bus_id;
  double memory_gib = 0;
  int major = 0, minor = 0;
};

// One cell of the link matrix for the pair (a, b): "NV18", or the PCIe path.
std::string LinkCell(internal::Nvml* nvml, const std::vector<Gpu>& gpus,
                     const std::vector<std::vector<internal::Nvml::NvLink>>& links, int a, int b) {
  if (a == b) return "X";
  int direct = 0, a_switch = 0, b_switch = 0;
  for (const auto& l : links[a]) {
    if (l.to_switch) ++a_switch;
    else if (l.remote_bus_id == gpus[b].bus_id) ++direct;
  }
  for (const auto& l : links[b]) b_switch += l.to_switch ? 1 : 0;
  // Through NVSwitches every GPU reaches every other over all its switch links (as nvidia-smi counts).
  const int count = direct + std::min(a_switch, b_switch);
  if (count > 0) return absl::StrCat("NV", count);
  if (nvml == nullptr) return "PCIe";
  auto path = nvml->PathType(gpus[a].bus_id, gpus[b].bus_id);
  return path.ok() ? *path : "?";
}

std::string Matrix(const std::vector<std::vector<std::string>>& cells) {
  std::string out = "        ";
  for (size_t j = 0; j < cells.size(); ++j) out += absl::StrFormat("%-7s", absl::StrCat("GPU", j));
  out += "\n";
  for (size_t i = 0; i < cells.size(); ++i) {
    out += absl::StrFormat("  %-6s", absl::StrCat("GPU", i));
    for (const auto& c : cells[i]) out += absl::StrFormat("%-7s", c);
    out += "\n";
  }
  return out;
}

}  // namespace

std::string SystemReport() {
  std::string out = "tinyddp launch --check\n";
  std::string why_no_nvml;
  std::unique_ptr<internal::Nvml> nvml = internal::Nvml::Load(&why_no_nvml);

  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::string driver_text = nvml ? nvml->DriverVersion() : "";
  out += absl::StrCat("CUDA driver:   ", driver > 0 ? CudaVersion(driver) : "not installed (no libcuda.so.1)",
                      driver_text.empty() ? "" : absl::StrCat(" (NVIDIA driver ", driver_text, ")"), "\n");
  out += absl::StrCat("CUDA runtime:  ", CudaVersion(runtime), " (this binary was built against ",
                      CudaVersion(CUDART_VERSION), ")\n");
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL encodes 2.28.3 as 22803 (major*10000 + minor*100 + patch) since 2.9.
    out += absl::StrCat("NCCL:          ", nccl / 10000, ".", (nccl / 100) % 100, ".", nccl % 100, "\n");
  }

  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    const std::string why = driver == 0 ? " (no NVIDIA driver on this machine)"
                            : err != cudaSuccess ? absl::StrCat(" (", cudaGetErrorString(err), ")")
                                                 : "";
    out += absl::StrCat("GPUs:          no GPU", why, "; workers will use the Gloo backend on CPU\n");
    return out;
  }
  std::vector<Gpu> gpus(count);
  out += absl::StrCat("GPUs:          ", count, "\n");
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), d);
    gpus[d] = {p.name, internal::NormalizeBusId(bus), p.totalGlobalMem / double(1 << 30), p.major, p.minor};
    out += absl::StrFormat("  GPU%d  %-28s %7.1f GiB  sm_%d%d  PCI %s\n", d, gpus[d].name, gpus[d].memory_gib,
                           p.major, p.minor, gpus[d].bus_id);
  }

  std::vector<std::vector<internal::Nvml::NvLink>> links(count);
  if (nvml) {
    for (int d = 0; d < count; ++d) {
      auto l = nvml->ActiveLinks(gpus[d].bus_id);
      if (l.ok()) links[d] = *l;
    }
  }
  std::vector<std::vector<std::string>> link_cells(count, std::vector<std::string>(count));
  std::vector<std::vector<std::string>> peer_cells(count, std::vector<std::string>(count));
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      link_cells[a][b] = LinkCell(nvml.get(), gpus, links, a, b);
      int can = 0;
      if (a != b) cudaDeviceCanAccessPeer(&can, a, b);
      peer_cells[a][b] = a == b ? "X" : (can ? "yes" : "no");
    }
  }
  out += "\nLinks between GPUs (like nvidia-smi topo -m):\n" + Matrix(link_cells);
  out += "  NV# = # NVLinks; PCIe path otherwise: PIX one switch, PXB several switches, PHB host bridge,\n"
         "  NODE across host bridges in one NUMA node, SYS across NUMA nodes";
  out += nvml ? "\n" : absl::StrCat("\n  (NVLink counts unavailable: ", why_no_nvml, ")\n");
  out += "\nPeer-to-peer access (cudaDeviceCanAccessPeer):\n" + Matrix(peer_cells);
  return out;
}

}  // namespace tinyddp::dist
