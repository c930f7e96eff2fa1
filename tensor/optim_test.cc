// SgdStep and AdamStep on the CPU against the update rules of torch.optim.SGD / Adam / AdamW written out
// by hand in double precision, over several steps with fresh random gradients each step, for several
// parameter tensors at once (odd shapes) in float64 and float32.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tensor/testing/ops_test_util.h"

namespace tinyddp {
namespace {

using ::tinyddp::testing::AsDoubles;
using ::tinyddp::testing::ExpectAllNear;
using ::tinyddp::testing::RandomTensor;

const Shape kParamShapes[] = {{7, 13}, {1}, {33, 10}};

double Tolerance(DType dt) { return dt == DType::kFloat64 ? 1e-12 : 2e-5; }

void RunSgd(const ops::SgdConfig& base, DType dt) {
  std::vector<Tensor> params, bufs;
  std::vector<std::vector<double>> ref_p, ref_buf;
  uint32_t seed = 1;
  for (const Shape& s : kParamShapes) {
    params.push_back(RandomTensor(s, dt, seed++));
    bufs.push_back(Tensor::Zeros(s, dt));
    ref_p.push_back(AsDoubles(params.back()));
    ref_buf.push_back(std::vector<double>(params.back().numel(), 0.0));
  }
  for (int step = 1; step <= 5; ++step) {
    std::vector<Tensor> grads;
    for (const Shape& s : kParamShapes) grads.push_back(RandomTensor(s, dt, seed++));
    ops::SgdConfig config = base;
    config.first_step = step == 1;
    ops::SgdStep(absl::MakeSpan(params), grads,
                 base.momentum != 0 ? absl::MakeSpan(bufs) : absl::Span<Tensor>(), config);
    // torch.optim.SGD, from its documentation.
    for (size_t t = 0; t < params.size(); ++t) {
      const auto g = AsDoubles(grads[t]);
      for (size_t i = 0; i < g.size(); ++i) {
        double d = g[i] + base.weight_decay * ref_p[t][i];
        if (base.momentum != 0) {
          ref_buf[t][i] = step == 1 ? d : base.momentum * ref_buf[t][i] + (1 - base.dampening) * d;
          d = base.nesterov ? d + base.momentum * ref_buf[t][i] : ref_buf[t][i];
        }
        ref_p[t][i] -= base.lr * d;
      }
      ExpectAllNear(AsDoubles(params[t]), ref_p[t], Tolerance(dt), Tolerance(dt),
                    ::testing::Message() << DTypeName(dt) << " step " << step << " param " << t);
      if (base.momentum != 0) ExpectAllNear(AsDoubles(bufs[t]), ref_buf[t], Tolerance(dt), Tolerance(dt));
    }
  }
}

TEST(SgdStep, MatchesTorchOptimSgdOverFiveSteps) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    RunSgd({.lr = 0.1}, dt);                                                      // plain
    RunSgd({.lr = 0.05, .momentum = 0.9}, dt);                                    // momentum
    RunSgd({.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, dt);
    RunSgd({.lr = 0.05, .momentum = 0.8, .weight_decay = 5e-3, .nesterov = true}, dt);
  }
}

TEST(SgdStep, HandComputedMomentumSteps) {
  Tensor p = Tensor::Full({1}, 1.0, DType::kFloat64), g = Tensor::Full({1}, 0.5, DType::kFloat64);
  Tensor buf = Tensor::Zeros({1}, DType::kFloat64);
  ops::SgdConfig c{.lr = 0.1, .momentum = 0.9};
  ops::SgdStep(absl::MakeSpan(&p, 1), absl::MakeConstSpan(&g, 1), absl::MakeSpan(&buf, 1), c);
  EXPECT_DOUBLE_EQ(p.Item(), 0.95);  // buf = g = 0.5 on the first step
  c.first_step = false;
  ops::SgdStep(absl::MakeSpan(&p, 1), absl::MakeConstSpan(&g, 1), absl::MakeSpan(&buf, 1), c);
  EXPECT_DOUBLE_EQ(buf.Item(), 0.95);  // 0.9 * 0.5 + 0.5
  EXPECT_DOUBLE_EQ(p.Item(), 0.855);   // 0.95 - 0.1 * 0.95
}

void RunAdam(const ops::AdamConfig& base, DType dt) {
  std::vector<Tensor> params, m, v;
  std::vector<std::vector<double>> rp, rm, rv;
  uint32_t seed = 50;
  for (const Shape& s : kParamShapes) {
    params.push_back(RandomTensor(s, dt, seed++));
    m.push_back(Tensor::Zeros(s, dt));
    v.push_back(Tensor::Zeros(s, dt));
    rp.push_back(AsDoubles(params.back()));
    rm.push_back(std::vector<double>(params.back().numel(), 0.0));
    rv.push_back(std::vector<double>(params.back().numel(), 0.0));
  }
  for (int step = 1; step <= 5; ++step) {
    std::vector<Tensor> grads;
    for (const Shape& s : kParamShapes) grads.push_back(RandomTensor(s, dt, seed++));
    ops::AdamConfig config = base;
    config.step = step;
    ops::AdamStep(absl::MakeSpan(params), grads, absl::MakeSpan(m), absl::MakeSpan(v), config);
    // torch.optim.Adam / AdamW, from their documentation.
    const double bc1 = 1 - std::pow(base.beta1, step), bc2 = 1 - std::pow(base.beta2, step);
    for (size_t t = 0; t < params.size(); ++t) {
      const auto g = AsDoubles(grads[t]);
      for (size_t i = 0; i < g.size(); ++i) {
        double grad = g[i];
        if (base.decoupled_weight_decay) {
          rp[t][i] *= 1 - base.lr * base.weight_decay;
        } else {
          grad += base.weight_decay * rp[t][i];
        }
        rm[t][i] = base.beta1 * rm[t][i] + (1 - base.beta1) * grad;
        rv[t][i] = base.beta2 * rv[t][i] + (1 - base.beta2) * grad * grad;
        rp[t][i] -= base.lr * (rm[t][i] / bc1) / (std::sqrt(rv[t][i] / bc2) + base.eps);
      }
      ExpectAllNear(AsDoubles(params[t]), rp[t], Tolerance(dt), Tolerance(dt),
                    ::testing::Message() << DTypeName(dt) << " step " << step << " param " << t);
      ExpectAllNear(AsDoubles(m[t]), rm[t], Tolerance(dt), Tolerance(dt));
      ExpectAllNear(AsDoubles(v[t]), rv[t], Tolerance(dt), Tolerance(dt));
    }
  }
}

TEST(AdamStep, MatchesTorchOptimAdamAndAdamWOverFiveSteps) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    RunAdam({.lr = 1e-2}, dt);
    RunAdam({.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1}, dt);  // AdamW
    RunAdam({.lr = 1e-2, .weight_decay = 0.05, .decoupled_weight_decay = false}, dt);          // Adam + L2
  }
}

TEST(AdamStep, FirstStepMovesEachWeightByLrTimesTheGradientSign) {
  // After bias correction the first step is lr * g / (|g| + eps): about lr in the direction of -g.
  Tensor p = Tensor::FromVector(std::vector<double>{1.0, -2.0, 0.5}, {3});
  Tensor g = Tensor::FromVector(std::vector<double>{0.3, -4.0, 1e-3}, {3});
  Tensor m = Tensor::Zeros({3}, DType::kFloat64), v = Tensor::Zeros({3}, DType::kFloat64);
  ops::AdamStep(absl::MakeSpan(&p, 1), absl::MakeConstSpan(&g, 1), absl::MakeSpan(&m, 1), absl::MakeSpan(&v, 1),
                {.lr = 0.01});
  const auto got = p.ToVector<double>();
  EXPECT_NEAR(got[0], 0.99, 1e-9);
  EXPECT_NEAR(got[1], -1.99, 1e-9);
  EXPECT_NEAR(got[2], 0.49, 1e-7);
}

// --- Device scalars (ops.h): the learning rate and Adam's step read from tensors -----------------------

// Copies of `ts` with their own storage.
std::vector<Tensor> Clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.Clone());
  return out;
}

TEST(SgdStep, ALearningRateTensorGivesTheBitsOfTheSameHostLearningRate) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    uint32_t seed = 40;
    std::vector<Tensor> host_p, bufs;
    for (const Shape& s : kParamShapes) {
      host_p.push_back(RandomTensor(s, dt, seed++));
      bufs.push_back(Tensor::Zeros(s, dt));
    }
    std::vector<Tensor> dev_p = Clones(host_p), dev_bufs = Clones(bufs);
    Tensor lr = Tensor::Zeros({1}, DType::kFloat64);
    for (int step = 0; step < 6; ++step) {
      std::vector<Tensor> grads;
      for (const Shape& s : kParamShapes) grads.push_back(RandomTensor(s, dt, seed++));
      const double rate = 0.3 / (step + 1.7);  // not representable in float: the rounding is what is compared
      ops::SgdConfig host{.lr = rate, .momentum = 0.9, .weight_decay = 0.01, .first_step = step == 0};
      ops::SgdStep(absl::MakeSpan(host_p), grads, absl::MakeSpan(bufs), host);
      ops::Fill(lr, rate);
      ops::SgdConfig device = host;
      device.lr = 123.0;  // ignored: the tensor wins
      device.lr_tensor = lr;
      ops::SgdStep(absl::MakeSpan(dev_p), grads, absl::MakeSpan(dev_bufs), device);
    }
    for (size_t t = 0; t < host_p.size(); ++t) {
      EXPECT_EQ(AsDoubles(dev_p[t]), AsDoubles(host_p[t])) << DTypeName(dt) << " param " << t;
      EXPECT_EQ(AsDoubles(dev_bufs[t]), AsDoubles(bufs[t])) << DTypeName(dt) << " buffer " << t;
    }
  }
}

TEST(AdamStep, LearningRateAndStepTensorsGiveTheBitsOfTheHostValuesOnTheCpu) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    uint32_t seed = 90;
    std::vector<Tensor> host_p, m, v;
    for (const Shape& s : kParamShapes) {
      host_p.push_back(RandomTensor(s, dt, seed++));
      m.push_back(Tensor::Zeros(s, dt));
      v.push_back(Tensor::Zeros(s, dt));
    }
    std::vector<Tensor> dev_p = Clones(host_p), dev_m = Clones(m), dev_v = Clones(v);
    Tensor lr = Tensor::Zeros({1}, DType::kFloat64), step_t = Tensor::Zeros({1}, DType::kFloat64);
    for (int step = 1; step <= 6; ++step) {
      std::vector<Tensor> grads;
      for (const Shape& s : kParamShapes) grads.push_back(RandomTensor(s, dt, seed++));
      const double rate = 0.01 / step;
      ops::AdamConfig host{.lr = rate, .weight_decay = 0.02, .step = step};
      ops::AdamStep(absl::MakeSpan(host_p), grads, absl::MakeSpan(m), absl::MakeSpan(v), host);
      ops::Fill(lr, rate);
      ops::Fill(step_t, step);
      ops::AdamConfig device = host;
      device.lr = 5.0;
      device.step = 1000;  // both ignored
      device.lr_tensor = lr;
      device.step_tensor = step_t;
      ops::AdamStep(absl::MakeSpan(dev_p), grads, absl::MakeSpan(dev_m), absl::MakeSpan(dev_v), device);
    }
    for (size_t t = 0; t < host_p.size(); ++t) {
      EXPECT_EQ(AsDoubles(dev_p[t]), AsDoubles(host_p[t])) << DTypeName(dt) << " param " << t;
      EXPECT_EQ(AsDoubles(dev_v[t]), AsDoubles(v[t])) << DTypeName(dt) << " exp_avg_sq " << t;
    }
  }
}

TEST(LookupAndAdvance, WalksTheTableOneEntryPerCallAndHoldsItsLastValue) {
  const std::vector<double> values = {0.5, 0.25, 0.125, 1e-3, 7e-5};
  const Tensor table = Tensor::FromVector<double>(values, {5});
  Tensor cursor = Tensor::FromVector<int64_t>({2}, {1});
  Tensor out = Tensor::Zeros({1}, DType::kFloat64);
  for (int64_t call = 0; call < 6; ++call) {
    ops::LookupAndAdvance(table, cursor, out);
    EXPECT_EQ(out.Item(), values[std::min<int64_t>(2 + call, 4)]) << "call " << call;
    EXPECT_EQ(cursor.ToVector<int64_t>()[0], 3 + call);
  }
}

TEST(OptimDeathTest, ADeviceScalarOfTheWrongKindStopsNamingIt) {
  std::vector<Tensor> params = {Tensor::Zeros({3})}, grads = {Tensor::Zeros({3})};
  ops::SgdConfig config;
  config.lr_tensor = Tensor::Zeros({1}, DType::kFloat32);
  EXPECT_DEATH(ops::SgdStep(absl::MakeSpan(params), grads, {}, config),
               "SgdStep: lr_tensor is \\[1\\] float32 cpu but must be a one-element float64 tensor");
  Tensor cursor = Tensor::Zeros({1}, DType::kInt64), out = Tensor::Zeros({1}, DType::kFloat64);
  EXPECT_DEATH(ops::LookupAndAdvance(Tensor::Zeros({0}, DType::kFloat64), cursor, out),
               "LookupAndAdvance: table is .* but must be a non-empty 1-D float64 tensor");
}

TEST(OptimDeathTest, MismatchedStateListsStop) {
  std::vector<Tensor> params = {Tensor::Zeros({3}), Tensor::Zeros({2})};
  std::vector<Tensor> grads = {Tensor::Zeros({3}), Tensor::Zeros({3})};
  std::vector<Tensor> bufs = {Tensor::Zeros({3}), Tensor::Zeros({2})};
  EXPECT_DEATH(ops::SgdStep(absl::MakeSpan(params), grads, absl::MakeSpan(bufs), {.momentum = 0.9}),
               "SgdStep: grads\\[1\\] is \\[3\\] float32 cpu but params\\[1\\] is \\[2\\] float32 cpu");
  std::vector<Tensor> one_buf = {Tensor::Zeros({3})};
  EXPECT_DEATH(ops::SgdStep(absl::MakeSpan(params), grads, absl::MakeSpan(one_buf), {.momentum = 0.9}),
               "SgdStep: 2 params but 1 momentum_bufs");
}

}  // namespace
}  // namespace tinyddp
