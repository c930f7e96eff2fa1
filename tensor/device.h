// Where a tensor's bytes live: the host (CPU) or one CUDA GPU ("cuda:1").
#ifndef TINYDDP_TENSOR_DEVICE_H_
#define TINYDDP_TENSOR_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // GPU ordinal for kCUDA; always 0 for kCPU

  static Device CPU() { return Device{DeviceType::kCPU, 0}; }
  static Device CUDA(int index = 0) { return Device{DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  /// "cpu" or "cuda:N".
  std::string ToString() const;
  /// Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; anything else is InvalidArgument.
  static absl::StatusOr<Device> Parse(absl::string_view text);

  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

}  // namespace tinyddp

#endif  // TINYDDP_TENSOR_DEVICE_H_
