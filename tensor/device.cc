// Device names and parsing (tensor/device.h).
#include "tensor/device.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tinyddp {

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> Device::Parse(absl::string_view text) {
  if (text == "cpu") return Device::CPU();
  if (text == "cuda") return Device::CUDA(0);
  absl::string_view rest = text;
  int index = -1;
  if (absl::ConsumePrefix(&rest, "cuda:") && !rest.empty() && absl::SimpleAtoi(rest, &index) && index >= 0 &&
      rest.find_first_not_of("0123456789") == absl::string_view::npos) {
    return Device::CUDA(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("not a device: \"", text, "\" (expected \"cpu\", \"cuda\" or \"cuda:N\")"));
}

}  // namespace tinyddp
