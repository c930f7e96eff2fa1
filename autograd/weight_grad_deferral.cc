// WeightGradDeferral (weight_grad_deferral.h).
#include "autograd/weight_grad_deferral.h"

#include <utility>

#include "base/check.h"

namespace tinyddp::autograd {
namespace {
thread_local WeightGradDeferral* active = nullptr;
}  // namespace

WeightGradDeferral::WeightGradDeferral() : previous_(active) {
  TINYDDP_CHECK_OP(previous_ == nullptr, "WeightGradDeferral", "one deferral per thread at a time");
  active = this;
}

WeightGradDeferral::~WeightGradDeferral() { active = previous_; }

std::vector<WeightGradWork> WeightGradDeferral::Take() { return std::exchange(work_, {}); }

WeightGradDeferral* WeightGradDeferral::Active() { return active; }

}  // namespace tinyddp::autograd
