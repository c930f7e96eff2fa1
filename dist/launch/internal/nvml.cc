// Nvml: see nvml.h. The declarations below mirror NVML's public C API (nvml.h, which ships with the
// driver development files, not with every machine); only the handful of calls used here.
#include "dist/launch/internal/nvml.h"

#include <dlfcn.h>

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tinyddp::dist::internal {
namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr int kEnabled = 1;       // nvmlEnableState_t NVML_FEATURE_ENABLED
constexpr int kLinkToSwitch = 2;  // nvmlIntNvLinkDeviceType_t NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr unsigned kMaxLinks = 64;  // more than any GPU has (H100/H200: 18); absent links return errors

// nvmlPciInfo_t (the layout since NVML's v2 PCI info; busIdLegacy first).
struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*driver_version)(char*, unsigned);
  nvmlReturn_t (*handle_by_bus_id)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*);
  nvmlReturn_t (*link_remote_pci)(nvmlDevice_t, unsigned, PciInfo*);
  nvmlReturn_t (*link_remote_type)(nvmlDevice_t, unsigned, int*);  // optional: NVML 11+
  nvmlReturn_t (*common_ancestor)(nvmlDevice_t, nvmlDevice_t, int*);

  std::string Error(nvmlReturn_t r) const {
    return error_string ? error_string(r) : absl::StrCat("NVML error ", r);
  }
};

std::string NormalizeBusId(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) == 4) {
    return absl::StrFormat("%04x:%02x:%02x.%x", domain, bus, device, function);
  }
  return absl::AsciiStrToLower(bus_id);
}

std::unique_ptr<Nvml> Nvml::Load(std::string* why_not) {
  void* handle = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *why_not = "libnvidia-ml.so.1 not found (it comes with the NVIDIA driver)";
    return nullptr;
  }
  std::unique_ptr<Nvml> nvml(new Nvml(handle));
  Api& a = *nvml->api_;
  auto sym = [&](const char* name) { return ::dlsym(handle, name); };
  a.init = reinterpret_cast<decltype(a.init)>(sym("nvmlInit_v2"));
  a.shutdown = reinterpret_cast<decltype(a.shutdown)>(sym("nvmlShutdown"));
  a.error_string = reinterpret_cast<decltype(a.error_string)>(sym("nvmlErrorString"));
  a.driver_version = reinterpret_cast<decltype(a.driver_version)>(sym("nvmlSystemGetDriverVersion"));
  a.handle_by_bus_id = reinterpret_cast<decltype(a.handle_by_bus_id)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  a.link_state = reinterpret_cast<decltype(a.link_state)>(sym("nvmlDeviceGetNvLinkState"));
  a.link_remote_pci = reinterpret_cast<decltype(a.link_remote_pci)>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  a.link_remote_type = reinterpret_cast<decltype(a.link_remote_type)>(sym("nvmlDeviceGetNvLinkRemoteDeviceType"));
  a.common_ancestor = reinterpret_cast<decltype(a.common_ancestor)>(sym("nvmlDeviceGetTopologyCommonAncestor"));
  if (!a.init || !a.shutdown || !a.handle_by_bus_id || !a.link_state || !a.link_remote_pci) {
    *why_not = "libnvidia-ml.so.1 lacks the NVLink queries (driver too old)";
    return nullptr;
  }
  if (nvmlReturn_t r = a.init(); r != kSuccess) {
    *why_not = absl::StrCat("nvmlInit failed: ", a.Error(r));
    a.shutdown = nullptr;  // nothing to shut down
    return nullptr;
  }
  return nvml;
}

Nvml::Nvml(void* handle) : handle_(handle), api_(new Api{}) {}

Nvml::~Nvml() {
  if (api_->shutdown) api_->shutdown();
  ::dlclose(handle_);
}

std::string Nvml::DriverVersion() {
  char text[96] = {0};
  if (!api_->driver_version || api_->driver_version(text, sizeof(text)) != kSuccess) return "";
  return text;
}

absl::StatusOr<std::vector<Nvml::NvLink>> Nvml::ActiveLinks(const std::string& bus_id) {
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = api_->handle_by_bus_id(bus_id.c_str(), &dev); r != kSuccess) {
    return absl::NotFoundError(absl::StrCat("NVML does not know the GPU at ", bus_id, ": ", api_->Error(r)));
  }
  std::vector<NvLink> links;
  for (unsigned link = 0; link < kMaxLinks; ++link) {
    int state = 0;
    if (api_->link_state(dev, link, &state) != kSuccess || state != kEnabled) continue;
    PciInfo pci{};
    if (api_->link_remote_pci(dev, link, &pci) != kSuccess) continue;
    NvLink l;
    l.remote_bus_id = NormalizeBusId(pci.bus_id);
    int type = -1;
    l.to_switch = api_->link_remote_type && api_->link_remote_type(dev, link, &type) == kSuccess &&
                  type == kLinkToSwitch;
    links.push_back(l);
  }
  return links;
}

absl::StatusOr<std::string> Nvml::PathType(const std::string& bus_a, const std::string& bus_b) {
  if (!api_->common_ancestor) return absl::UnimplementedError("no nvmlDeviceGetTopologyCommonAncestor");
  nvmlDevice_t a = nullptr, b = nullptr;
  if (api_->handle_by_bus_id(bus_a.c_str(), &a) != kSuccess || api_->handle_by_bus_id(bus_b.c_str(), &b) != kSuccess) {
    return absl::NotFoundError("unknown GPU");
  }
  int level = 0;
  if (nvmlReturn_t r = api_->common_ancestor(a, b, &level); r != kSuccess) return absl::InternalError(api_->Error(r));
  // nvmlGpuTopologyLevel_t: INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50.
  if (level <= 10) return std::string("PIX");
  if (level <= 20) return std::string("PXB");
  if (level <= 30) return std::string("PHB");
  if (level <= 40) return std::string("NODE");
  return std::string("SYS");
}

}  // namespace tinyddp::dist::internal
