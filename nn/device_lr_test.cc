// DeviceLr and Optimizer::UseDeviceLr on the CPU (device_lr_gpu_test.cc: the same on a GPU, inside a CUDA
// graph). The claims: Advance walks the schedule's own values one step per call and holds the last;
// SetStep resumes the curve; SGD reading the rate from DeviceLr ends bit for bit where set_lr(LrAt(step))
// ends; so does Adam, whose step count then lives beside the rate (and only then can its Step be recorded
// into a CUDA graph); Adam refuses to split its count.
#include "nn/device_lr.h"

#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/lr_schedule.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

using autograd::Variable;

TEST(DeviceLr, AdvanceWalksTheScheduleOneStepPerCallAndHoldsTheLastValue) {
  const CosineWithWarmupLr cosine(0.1, 3, 10, 0.001);
  DeviceLr lr(cosine, 10, Device::CPU());
  EXPECT_EQ(lr.num_steps(), 10);
  EXPECT_EQ(lr.NextStep(), 0);
  for (int64_t step = 0; step < 14; ++step) {
    lr.Advance();
    EXPECT_EQ(lr.lr().Item(), cosine.LrAt(std::min<int64_t>(step, 9))) << "step " << step;  // the same double
  }
  EXPECT_EQ(lr.NextStep(), 14);
  lr.SetStep(6);  // a resumed run
  EXPECT_EQ(lr.lr().Item(), cosine.LrAt(6));
  lr.Advance();
  EXPECT_EQ(lr.lr().Item(), cosine.LrAt(6));
  lr.Advance();
  EXPECT_EQ(lr.lr().Item(), cosine.LrAt(7));
}

// Two copies of one small set of parameters, with random gradients that are the same for both each step.
struct Twins {
  std::vector<Variable> a, b;
  Twins() {
    uint64_t seed = 3;
    for (const Shape& s : {Shape{9, 5}, Shape{5}, Shape{4, 9}}) {
      Tensor t = Tensor::Empty(s);
      ops::NormalInit(t, 0, 1, seed++);
      a.push_back(Variable(t.Clone(), /*requires_grad=*/true));
      b.push_back(Variable(t.Clone(), /*requires_grad=*/true));
    }
  }
  void SetGrads(uint64_t seed) {
    for (size_t i = 0; i < a.size(); ++i) {
      Tensor g = Tensor::Empty(a[i].shape());
      ops::NormalInit(g, 0, 1, seed * 10 + i);
      a[i].set_grad(g.Clone());
      b[i].set_grad(g.Clone());
    }
  }
  void ExpectEqual() const {
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].data().ToVector<float>(), b[i].data().ToVector<float>()) << "parameter " << i;
    }
  }
};

TEST(DeviceLr, SgdReadingItEndsBitForBitWhereSetLrOnTheHostEnds) {
  const CosineWithWarmupLr cosine(0.2, 2, 12);
  Twins twins;
  SGD host(twins.a, {.lr = 1.0, .momentum = 0.9, .weight_decay = 1e-3});
  SGD device(twins.b, {.lr = 1.0, .momentum = 0.9, .weight_decay = 1e-3});
  DeviceLr lr(cosine, 12, Device::CPU());
  device.UseDeviceLr(lr.lr());
  EXPECT_TRUE(device.device_lr().defined());
  for (int64_t step = 0; step < 12; ++step) {
    twins.SetGrads(step);
    host.set_lr(cosine.LrAt(step));
    host.Step();
    lr.Advance();
    device.Step();
  }
  twins.ExpectEqual();
}

TEST(DeviceLr, AdamReadingItEndsBitForBitWhereTheHostEndsAndCountsItsStepsBesideIt) {
  const StepLr schedule(0.01, 4, 0.5);
  Twins twins;
  AdamW host(twins.a);
  AdamW device(twins.b);
  DeviceLr lr(schedule, 10, Device::CPU());
  device.UseDeviceLr(lr.lr());
  for (int64_t step = 0; step < 10; ++step) {
    twins.SetGrads(100 + step);
    host.set_lr(schedule.LrAt(step));
    host.Step();
    lr.Advance();
    device.Step();
  }
  twins.ExpectEqual();
  EXPECT_EQ(device.step(0), 10);
  EXPECT_EQ(device.StateTensors().at("state.2.step").Item(), 10.0);
  // Back to the host rate: the count comes home.
  device.UseDeviceLr(Tensor());
  EXPECT_FALSE(device.device_lr().defined());
  EXPECT_EQ(device.step(1), 10);
}

TEST(DeviceLr, AdamSaysItsStepCannotBeRecordedUntilItsCountLivesOnTheDeviceAndSgdAlwaysCan) {
  Twins twins;
  AdamW adam(twins.a);
  SGD sgd(twins.b, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(sgd.WhyStepNotCapturable(), "") << "SGD passes nothing that changes from step to step";
  const std::string why = adam.WhyStepNotCapturable();
  EXPECT_NE(why.find("AdamW passes its step count"), std::string::npos) << why;
  EXPECT_NE(why.find("UseDeviceLr"), std::string::npos) << "it says what to do: " << why;
  DeviceLr lr(ConstantLr(0.01), 4, Device::CPU());
  adam.UseDeviceLr(lr.lr());
  EXPECT_EQ(adam.WhyStepNotCapturable(), "");
  adam.UseDeviceLr(Tensor());  // back on the host: not capturable again
  EXPECT_NE(adam.WhyStepNotCapturable(), "");
}

TEST(DeviceLrDeathTest, AdamWithADeviceRateStepsEveryParameterTogether) {
  Twins twins;
  AdamW adam(twins.a);
  DeviceLr lr(ConstantLr(0.01), 1, Device::CPU());
  adam.UseDeviceLr(lr.lr());
  twins.SetGrads(1);
  twins.a[1].set_grad(Tensor());
  EXPECT_DEATH(adam.Step(), "with a device learning rate every parameter steps together .* only 2 of 3");
  EXPECT_DEATH(SGD(twins.a).UseDeviceLr(Tensor::Zeros({1})),
               "the device learning rate must be a one-element float64 tensor on cpu");
}

}  // namespace
}  // namespace tinyddp::nn
