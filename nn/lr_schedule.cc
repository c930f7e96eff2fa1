// Learning-rate schedules (nn/lr_schedule.h).
#include "nn/lr_schedule.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tinyddp::nn {

double ConstantLr::LrAt(int64_t step) const {
  TINYDDP_CHECK_OP(step >= 0, "ConstantLr", "step must be >= 0, got ", step);
  return base_;
}

std::string ConstantLr::ToString() const { return absl::StrCat("constant(base=", base_, ")"); }

StepLr::StepLr(double base, int64_t step_size, double gamma) : base_(base), step_size_(step_size), gamma_(gamma) {
  TINYDDP_CHECK_OP(step_size > 0, "StepLr", "step_size must be > 0, got ", step_size);
}

double StepLr::LrAt(int64_t step) const {
  TINYDDP_CHECK_OP(step >= 0, "StepLr", "step must be >= 0, got ", step);
  return base_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

std::string StepLr::ToString() const {
  return absl::StrCat("step(base=", base_, ", step_size=", step_size_, ", gamma=", gamma_, ")");
}

CosineWithWarmupLr::CosineWithWarmupLr(double base, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : base_(base), warmup_(warmup_steps), total_(total_steps), min_(min_lr) {
  TINYDDP_CHECK_OP(total_steps > 0 && warmup_steps >= 0 && warmup_steps <= total_steps, "CosineWithWarmupLr",
                   "needs 0 <= warmup_steps <= total_steps and total_steps > 0, got warmup ", warmup_steps,
                   ", total ", total_steps);
}

double CosineWithWarmupLr::LrAt(int64_t step) const {
  TINYDDP_CHECK_OP(step >= 0, "CosineWithWarmupLr", "step must be >= 0, got ", step);
  if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (step >= total_) return min_;
  const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_ + (base_ - min_) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::string CosineWithWarmupLr::ToString() const {
  return absl::StrCat("cosine(base=", base_, ", warmup=", warmup_, ", total=", total_, ", min=", min_, ")");
}

}  // namespace tinyddp::nn
