// DeviceLr (nn/device_lr.h): a schedule tabulated onto the device and a cursor moved by a kernel.
#include "nn/device_lr.h"

#include <vector>

#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::nn {

DeviceLr::DeviceLr(const LrSchedule& schedule, int64_t num_steps, Device device) {
  TINYDDP_CHECK_OP(num_steps >= 1, "DeviceLr", "num_steps must be >= 1, got ", num_steps,
                   "; hint: the steps of the whole run (epochs x steps per epoch)");
  std::vector<double> values(static_cast<size_t>(num_steps));
  for (int64_t s = 0; s < num_steps; ++s) values[s] = schedule.LrAt(s);
  table_ = Tensor::FromVector<double>(values, {num_steps}, device);
  step_ = Tensor::Zeros({1}, DType::kInt64, device);
  lr_ = Tensor::Full({1}, values[0], DType::kFloat64, device);
}

void DeviceLr::Advance() { ops::LookupAndAdvance(table_, step_, lr_); }

void DeviceLr::SetStep(int64_t step) {
  TINYDDP_CHECK_OP(step >= 0, "DeviceLr::SetStep", "step must be >= 0, got ", step);
  ops::CopyInto(step_, Tensor::FromVector<int64_t>({step}, {1}));
  const int64_t last = num_steps() - 1;
  ops::CopyInto(lr_, table_.Rows(step < last ? step : last, (step < last ? step : last) + 1));
}

int64_t DeviceLr::NextStep() const { return step_.ToVector<int64_t>()[0]; }

}  // namespace tinyddp::nn
