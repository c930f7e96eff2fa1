// SGD, Adam and AdamW against PyTorch's documented update rules, computed by hand in double precision
// over several steps with random gradients, for every option that changes the rule.
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

using Vec = std::vector<double>;

Tensor Random(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape));
  ops::UniformInit(t, -1.0, 1.0, seed);
  return t;
}

Vec ToDouble(const Tensor& t) {
  const std::vector<float> f = t.ToVector<float>();
  return Vec(f.begin(), f.end());
}

void ExpectClose(const Tensor& actual, const Vec& expected, const char* what) {
  const std::vector<float> a = actual.ToVector<float>();
  ASSERT_EQ(a.size(), expected.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], expected[i], 2e-6 + 2e-5 * std::abs(expected[i])) << what << " element " << i;
  }
}

// Two parameters of odd shapes, random gradients for each step, and a double-precision mirror.
struct Problem {
  std::vector<Variable> params = {Variable(Random({7, 3}, 1), true, "w"), Variable(Random({5}, 2), true, "b")};
  std::vector<Vec> ref = {ToDouble(params[0].data()), ToDouble(params[1].data())};
  // Sets a fresh random gradient on every parameter for step t; returns them for the reference.
  std::vector<Vec> SetGrads(int t) {
    std::vector<Vec> grads;
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = Random(params[i].shape(), 100 + 10 * t + i);
      params[i].set_grad(g);
      grads.push_back(ToDouble(g));
    }
    return grads;
  }
};

// torch.optim.SGD, step by step as documented.
struct SgdReference {
  SgdOptions o;
  std::vector<Vec> bufs;
  void Step(std::vector<Vec>& params, const std::vector<Vec>& grads) {
    const bool first = bufs.empty();
    if (first) bufs.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      for (size_t k = 0; k < params[i].size(); ++k) {
        double g = grads[i][k] + o.weight_decay * params[i][k];
        if (o.momentum != 0) {
          if (first) bufs[i].push_back(g);
          else bufs[i][k] = o.momentum * bufs[i][k] + (1 - o.dampening) * g;
          g = o.nesterov ? g + o.momentum * bufs[i][k] : bufs[i][k];
        }
        params[i][k] -= o.lr * g;
      }
    }
  }
};

void CheckSgd(const SgdOptions& options) {
  Problem pb;
  SGD sgd(pb.params, options);
  SgdReference ref{options, {}};
  for (int t = 0; t < 4; ++t) {
    const std::vector<Vec> grads = pb.SetGrads(t);
    sgd.Step();
    ref.Step(pb.ref, grads);
    for (size_t i = 0; i < pb.params.size(); ++i) ExpectClose(pb.params[i].data(), pb.ref[i], "param");
  }
  if (options.momentum != 0) {
    const TensorMap state = sgd.StateTensors();
    ASSERT_EQ(state.size(), 2u);
    ExpectClose(state.at("state.0.momentum_buffer"), ref.bufs[0], "momentum buffer");
  }
}

TEST(SGD, PlainStepsMatchPyTorch) { CheckSgd({.lr = 0.1}); }
TEST(SGD, MomentumMatchesPyTorch) { CheckSgd({.lr = 0.05, .momentum = 0.9}); }
TEST(SGD, MomentumWithDampeningMatchesPyTorch) { CheckSgd({.lr = 0.05, .momentum = 0.8, .dampening = 0.3}); }
TEST(SGD, NesterovMatchesPyTorch) { CheckSgd({.lr = 0.05, .momentum = 0.9, .nesterov = true}); }
TEST(SGD, WeightDecayWithMomentumMatchesPyTorch) {
  CheckSgd({.lr = 0.05, .momentum = 0.7, .dampening = 0.1, .weight_decay = 0.01});
}
TEST(SGD, WeightDecayWithNesterovMatchesPyTorch) {
  CheckSgd({.lr = 0.02, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true});
}

// torch.optim.Adam / AdamW, step by step as documented.
struct AdamReference {
  AdamOptions o;
  bool decoupled;
  std::vector<Vec> m, v;
  std::vector<int> steps;
  void StepOne(size_t i, Vec& p, const Vec& grad) {
    if (m.size() <= i) m.resize(i + 1), v.resize(i + 1), steps.resize(i + 1, 0);
    if (m[i].empty()) m[i].assign(p.size(), 0.0), v[i].assign(p.size(), 0.0);
    const int t = ++steps[i];
    for (size_t k = 0; k < p.size(); ++k) {
      double g = grad[k];
      if (decoupled) p[k] *= 1 - o.lr * o.weight_decay;
      else g += o.weight_decay * p[k];
      m[i][k] = o.beta1 * m[i][k] + (1 - o.beta1) * g;
      v[i][k] = o.beta2 * v[i][k] + (1 - o.beta2) * g * g;
      const double m_hat = m[i][k] / (1 - std::pow(o.beta1, t));
      const double v_hat = v[i][k] / (1 - std::pow(o.beta2, t));
      p[k] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

void CheckAdam(const AdamOptions& options, bool decoupled) {
  Problem pb;
  AdamWOptions w;
  static_cast<AdamOptions&>(w) = options;
  std::unique_ptr<Adam> adam =
      decoupled ? std::make_unique<AdamW>(pb.params, w) : std::make_unique<Adam>(pb.params, options);
  AdamReference ref{options, decoupled, {}, {}, {}};
  for (int t = 0; t < 4; ++t) {
    const std::vector<Vec> grads = pb.SetGrads(t);
    adam->Step();
    for (size_t i = 0; i < pb.params.size(); ++i) {
      ref.StepOne(i, pb.ref[i], grads[i]);
      ExpectClose(pb.params[i].data(), pb.ref[i], "param");
    }
  }
  const TensorMap state = adam->StateTensors();
  ExpectClose(state.at("state.1.exp_avg"), ref.m[1], "exp_avg");
  ExpectClose(state.at("state.1.exp_avg_sq"), ref.v[1], "exp_avg_sq");
  EXPECT_EQ(state.at("state.1.step").Item(), 4.0);
}

TEST(Adam, StepsMatchPyTorch) { CheckAdam({.lr = 0.01}, false); }
TEST(Adam, L2WeightDecayMatchesPyTorch) {
  CheckAdam({.lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}, false);
}
TEST(AdamW, DecoupledWeightDecayMatchesPyTorch) {
  CheckAdam({.lr = 0.02, .beta1 = 0.85, .beta2 = 0.995, .eps = 1e-7, .weight_decay = 0.1}, true);
}
TEST(AdamW, DefaultWeightDecayIsPyTorchs) { EXPECT_EQ(AdamWOptions().weight_decay, 1e-2); }

TEST(Adam, ParametersWithoutGradientAreSkippedAndKeepTheirOwnStepCount) {
  Problem pb;
  const AdamOptions options{.lr = 0.05, .weight_decay = 0.0};
  Adam adam(pb.params, options);
  AdamReference ref{options, false, {}, {}, {}};
  std::vector<Vec> grads = pb.SetGrads(0);
  adam.Step();  // both parameters: step 1
  ref.StepOne(0, pb.ref[0], grads[0]);
  ref.StepOne(1, pb.ref[1], grads[1]);
  grads = pb.SetGrads(1);
  pb.params[1].set_grad(Tensor());  // parameter 1 gets no gradient this time
  adam.Step();
  ref.StepOne(0, pb.ref[0], grads[0]);
  ExpectClose(pb.params[1].data(), pb.ref[1], "skipped param");
  EXPECT_EQ(adam.step(0), 2);
  EXPECT_EQ(adam.step(1), 1);
  grads = pb.SetGrads(2);
  adam.Step();  // steps 3 and 2: two fused groups with different bias corrections
  ref.StepOne(0, pb.ref[0], grads[0]);
  ref.StepOne(1, pb.ref[1], grads[1]);
  ExpectClose(pb.params[0].data(), pb.ref[0], "param 0");
  ExpectClose(pb.params[1].data(), pb.ref[1], "param 1");
}

TEST(Optimizers, StateTensorsRoundTripAndTrainingContinuesIdentically) {
  for (int kind = 0; kind < 2; ++kind) {
    Problem a, b;  // same seeds: identical parameters
    auto make = [kind](const std::vector<Variable>& p) -> std::unique_ptr<Optimizer> {
      if (kind == 0) return std::make_unique<SGD>(p, SgdOptions{.lr = 0.1, .momentum = 0.9});
      return std::make_unique<AdamW>(p, AdamWOptions{});
    };
    auto opt_a = make(a.params);
    for (int t = 0; t < 2; ++t) {
      a.SetGrads(t);
      opt_a->Step();
    }
    // b starts from a's parameters and state, as a resumed run would.
    TensorMap saved;
    for (const auto& [name, t] : opt_a->StateTensors()) saved[name] = t.Clone();
    for (size_t i = 0; i < b.params.size(); ++i) b.params[i].set_data(a.params[i].data().Clone());
    auto opt_b = make(b.params);
    ASSERT_TRUE(opt_b->LoadStateTensors(saved).ok());
    for (int t = 2; t < 4; ++t) {
      a.SetGrads(t);
      b.SetGrads(t);
      opt_a->Step();
      opt_b->Step();
    }
    for (size_t i = 0; i < a.params.size(); ++i) {
      EXPECT_EQ(a.params[i].data().ToVector<float>(), b.params[i].data().ToVector<float>()) << "kind " << kind;
    }
  }
}

TEST(Optimizers, LoadStateTensorsRejectsWhatDoesNotFit) {
  Problem pb;
  SGD sgd(pb.params, {.lr = 0.1, .momentum = 0.9});
  Adam adam(pb.params, {});
  EXPECT_FALSE(sgd.LoadStateTensors({{"state.0.momentum_buffer", Tensor::Zeros({3, 7})}}).ok());  // transposed
  EXPECT_FALSE(sgd.LoadStateTensors({{"state.2.momentum_buffer", Tensor::Zeros({5})}}).ok());     // no param 2
  EXPECT_FALSE(sgd.LoadStateTensors({{"state.1.velocity", Tensor::Zeros({5})}}).ok());
  EXPECT_FALSE(sgd.LoadStateTensors({{"momentum_buffer", Tensor::Zeros({5})}}).ok());
  const absl::Status partial = adam.LoadStateTensors({{"state.1.exp_avg", Tensor::Zeros({5})}});
  EXPECT_FALSE(partial.ok());
  EXPECT_NE(partial.message().find("exp_avg_sq"), std::string::npos) << partial.message();
  EXPECT_TRUE(sgd.LoadStateTensors({{"state.1.momentum_buffer", Tensor::Zeros({5})}}).ok());
}

TEST(OptimizerDeathTest, NesterovWithoutMomentumStops) {
  Problem pb;
  EXPECT_DEATH(SGD(pb.params, {.lr = 0.1, .nesterov = true}), "nesterov momentum requires momentum > 0");
}

}  // namespace
}  // namespace tinyddp::nn
