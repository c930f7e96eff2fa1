// DeviceLr and device learning rates on a GPU. The claims: SGD reading its rate from the device ends bit for
// bit where set_lr on the host ends, in float32 and with bfloat16 compute copies; a step recorded into a
// CUDA graph (tensor/cuda_graph.h) with the schedule's Advance in it follows the schedule at every replay,
// for SGD bit for bit the eager host-rate run, for Adam bit for bit its eager device-rate run and within an
// ulp-level tolerance of the host's bias corrections. Skips without a GPU.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/variable.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/device_lr.h"
#include "nn/lr_schedule.h"
#include "nn/sgd.h"
#include "tensor/cuda_device.h"
#include "tensor/cuda_graph.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp::nn {
namespace {

using autograd::Variable;

#define SKIP_WITHOUT_GPU() \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "needs a CUDA GPU; none is visible"

const Device kGpu = Device::CUDA(0);

// The raw bits of a bfloat16 tensor.
std::vector<uint16_t> Bits(const Tensor& t) {
  std::vector<uint16_t> bits;
  for (BFloat16 b : t.ToVector<BFloat16>()) bits.push_back(b.bits);
  return bits;
}

// `n` parameter sets with the same values, fixed random gradients, and optional bfloat16 compute copies.
struct Copies {
  std::vector<std::vector<Variable>> params;
  std::vector<std::vector<Tensor>> bf16;
  Copies(int n, bool with_bf16) : params(n), bf16(n) {
    uint64_t seed = 11;
    for (const Shape& s : {Shape{37, 19}, Shape{19}, Shape{5, 37}, Shape{1029}}) {
      Tensor t = Tensor::Empty(s, DType::kFloat32, kGpu), g = Tensor::Empty(s, DType::kFloat32, kGpu);
      ops::NormalInit(t, 0, 1, seed++);
      ops::NormalInit(g, 0, 0.1, seed++);
      for (int k = 0; k < n; ++k) {
        params[k].push_back(Variable(t.Clone(), /*requires_grad=*/true));
        params[k].back().set_grad(g.Clone());
        if (with_bf16) bf16[k].push_back(Tensor::Zeros(s, DType::kBFloat16, kGpu));
      }
    }
  }
  std::vector<std::pair<Variable, Tensor>> CopiesOf(int k) const {
    std::vector<std::pair<Variable, Tensor>> out;
    for (size_t i = 0; i < bf16[k].size(); ++i) out.push_back({params[k][i], bf16[k][i]});
    return out;
  }
  std::vector<float> Values(int k, size_t i) const { return params[k][i].data().ToVector<float>(); }
};

class DeviceLrGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) return;
    cuda::SetDevice(0);
    cuda::Stream::SetCurrent(cuda::Stream::Create(0));  // graphs are never recorded on the legacy stream
  }
};

TEST_F(DeviceLrGpu, SgdReadingTheRateFromTheDeviceMatchesTheHostRateBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 compute copies" : "fp32");
    const CosineWithWarmupLr cosine(0.3, 3, 15);
    Copies c(2, bf16);
    SGD host(c.params[0], {.lr = 1, .momentum = 0.9, .weight_decay = 1e-3});
    SGD device(c.params[1], {.lr = 1, .momentum = 0.9, .weight_decay = 1e-3});
    host.SetComputeCopies(c.CopiesOf(0));
    device.SetComputeCopies(c.CopiesOf(1));
    DeviceLr lr(cosine, 15, kGpu);
    device.UseDeviceLr(lr.lr());
    for (int64_t step = 0; step < 15; ++step) {
      host.set_lr(cosine.LrAt(step));
      host.Step();
      lr.Advance();
      device.Step();
    }
    for (size_t i = 0; i < c.params[0].size(); ++i) {
      EXPECT_EQ(c.Values(1, i), c.Values(0, i)) << "parameter " << i;
      if (bf16) EXPECT_EQ(Bits(c.bf16[1][i]), Bits(c.bf16[0][i])) << "copy " << i;
    }
  }
}

TEST_F(DeviceLrGpu, ARecordedStepFollowsTheScheduleAtEveryReplay) {
  SKIP_WITHOUT_GPU();
  const CosineWithWarmupLr cosine(0.3, 2, 12, 0.01);
  const int kReplays = 12;
  // SGD: eager with the host rate, against the graph of {Advance; Step}.
  {
    Copies c(2, /*with_bf16=*/false);
    SGD host(c.params[0], {.lr = 1, .momentum = 0.9});
    SGD graphed(c.params[1], {.lr = 1, .momentum = 0.9});
    DeviceLr lr(cosine, kReplays + 1, kGpu);
    graphed.UseDeviceLr(lr.lr());
    host.set_lr(cosine.LrAt(0));
    host.Step();  // the first step makes the momentum buffers: it is not the steady state a graph repeats
    lr.Advance();
    graphed.Step();
    cuda::CudaGraph graph;
    ASSERT_TRUE(graph.Capture(cuda::Stream::Current(0), [&] {
      lr.Advance();
      graphed.Step();
    }).ok());
    EXPECT_EQ(lr.NextStep(), 1) << "recording ran nothing";
    for (int k = 1; k <= kReplays; ++k) {
      host.set_lr(cosine.LrAt(k));
      host.Step();
      ASSERT_TRUE(graph.Replay().ok());
    }
    EXPECT_EQ(lr.NextStep(), kReplays + 1);
    EXPECT_EQ(lr.lr().Item(), cosine.LrAt(kReplays));
    for (size_t i = 0; i < c.params[0].size(); ++i) EXPECT_EQ(c.Values(1, i), c.Values(0, i)) << "parameter " << i;
  }
  // AdamW: its step count moves on the device with the rate. Against its eager device-rate twin: the same
  // bits; against the host's bias corrections: within rounding.
  {
    Copies c(3, /*with_bf16=*/true);
    AdamW host(c.params[0]), eager(c.params[1]), graphed(c.params[2]);
    for (int k = 0; k < 3; ++k) {
      Optimizer& opt = k == 0 ? static_cast<Optimizer&>(host) : k == 1 ? eager : graphed;
      opt.SetComputeCopies(c.CopiesOf(k));
    }
    DeviceLr eager_lr(cosine, kReplays + 1, kGpu), graphed_lr(cosine, kReplays + 1, kGpu);
    eager.UseDeviceLr(eager_lr.lr());
    graphed.UseDeviceLr(graphed_lr.lr());
    auto step_all_eagerly = [&](int k) {
      host.set_lr(cosine.LrAt(k));
      host.Step();
      eager_lr.Advance();
      eager.Step();
    };
    step_all_eagerly(0);
    graphed_lr.Advance();
    graphed.Step();
    cuda::CudaGraph graph;
    ASSERT_TRUE(graph.Capture(cuda::Stream::Current(0), [&] {
      graphed_lr.Advance();
      graphed.Step();
    }).ok());
    for (int k = 1; k <= kReplays; ++k) {
      step_all_eagerly(k);
      ASSERT_TRUE(graph.Replay().ok());
    }
    EXPECT_EQ(graphed.step(0), kReplays + 1);
    for (size_t i = 0; i < c.params[0].size(); ++i) {
      EXPECT_EQ(c.Values(2, i), c.Values(1, i)) << "parameter " << i << ": replayed vs eager device-rate AdamW";
      EXPECT_EQ(Bits(c.bf16[2][i]), Bits(c.bf16[1][i])) << "copy " << i;
      const std::vector<float> want = c.Values(0, i), got = c.Values(2, i);
      for (size_t j = 0; j < want.size(); ++j) {
        ASSERT_NEAR(got[j], want[j], 1e-6 * (1 + std::abs(want[j]))) << "parameter " << i << "[" << j << "]";
      }
    }
  }
}

}  // namespace
}  // namespace tinyddp::nn
