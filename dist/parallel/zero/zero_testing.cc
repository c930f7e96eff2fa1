// ZeRO test helpers (zero_testing.h).
#include "dist/parallel/zero/zero_testing.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/sgd.h"

namespace tinyddp::dist::zero_testing {

std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt kind, std::vector<autograd::Variable> params) {
  if (kind == Opt::kSgdMomentum) {
    nn::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    return std::make_unique<nn::SGD>(std::move(params), o);
  }
  nn::AdamWOptions o;
  o.lr = 1e-2;
  return std::make_unique<nn::AdamW>(std::move(params), o);
}

const char* Name(Opt kind) { return kind == Opt::kSgdMomentum ? "SGD(momentum=0.9, wd)" : "AdamW"; }

void ExpectSameBits(const nn::TensorMap& actual, const nn::TensorMap& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, want] : expected) {
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << what << ": missing " << name;
    const Tensor a = it->second.To(Device::CPU()), e = want.To(Device::CPU());
    ASSERT_EQ(a.shape(), e.shape()) << what << ": " << name;
    ASSERT_EQ(a.dtype(), e.dtype()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(a.data_ptr(), e.data_ptr(), a.nbytes()), 0) << what << ": " << name << " differs";
  }
}

void ExpectNear(const nn::TensorMap& actual, const nn::TensorMap& expected, double atol, double rtol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, want] : expected) {
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << what << ": missing " << name;
    ASSERT_EQ(it->second.shape(), want.shape()) << what << ": " << name;
    if (want.dim() == 0) {
      EXPECT_EQ(it->second.Item(), want.Item()) << what << ": " << name;
      continue;
    }
    const std::vector<float> a = it->second.To(Device::CPU()).ToVector<float>();
    const std::vector<float> e = want.To(Device::CPU()).ToVector<float>();
    int bad = 0;
    for (size_t i = 0; i < a.size() && bad < 5; ++i) {
      if (!(std::fabs(a[i] - e[i]) <= atol + rtol * std::fabs(e[i]))) {
        ADD_FAILURE() << what << ": " << name << "[" << i << "] = " << a[i] << ", expected " << e[i];
        ++bad;
      }
    }
  }
}

}  // namespace tinyddp::dist::zero_testing
