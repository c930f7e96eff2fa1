// Tests of the backward engine (autograd/engine.h): accumulation, the hook contract DDP relies on,
// gradients that are views into a bucket, the no-grad guard, and the misuse messages.
#include "autograd/engine.h"

#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

Tensor Random(Shape shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::Empty(std::move(shape));
  ops::UniformInit(t, low, high, seed);
  return t;
}

Variable Param(Shape shape, uint64_t seed, const std::string& name) {
  return Variable(Random(std::move(shape), seed), /*requires_grad=*/true, name);
}

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected, float tol = 1e-5f) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

TEST(Backward, AccumulatesIntoLeafGradAcrossTwoBackwardCalls) {
  // L = sum(x @ w^T): dL/dw[o][i] = sum_n x[n][i], the same for every output row o.
  const Variable x(Random({4, 3}, 1));
  const Variable w = Param({5, 3}, 2, "w");
  Backward(Sum(Linear(x, w, Variable())));
  const std::vector<float> xs = x.data().ToVector<float>();
  std::vector<float> once(15);
  for (int o = 0; o < 5; ++o) {
    for (int i = 0; i < 3; ++i) once[o * 3 + i] = xs[i] + xs[3 + i] + xs[6 + i] + xs[9 + i];
  }
  ExpectNear(w.grad().ToVector<float>(), once);

  Backward(Sum(Linear(x, w, Variable())));  // a new graph, the same leaf: the gradient adds up
  std::vector<float> twice = once;
  for (float& v : twice) v *= 2;
  ExpectNear(w.grad().ToVector<float>(), twice);
}

// A two-layer MLP with hooks on all four parameters; returns the names in the order the hooks ran.
struct TinyMlp {
  Variable w1 = Param({6, 5}, 11, "0.weight"), b1 = Param({6}, 12, "0.bias");
  Variable w2 = Param({3, 6}, 13, "2.weight"), b2 = Param({3}, 14, "2.bias");
  Variable x{Random({7, 5}, 15)};
  Tensor labels = Tensor::FromVector<int64_t>({0, 2, 1, 1, 0, 2, 2}, {7});
  Variable Loss() const { return CrossEntropy(Linear(Relu(Linear(x, w1, b1)), w2, b2), labels); }
  std::vector<Variable> params() const { return {w1, b1, w2, b2}; }
};

TEST(Backward, HooksFireOncePerLeafPerBackwardInProductionOrder) {
  TinyMlp mlp;
  std::vector<std::string> fired;
  for (const Variable& p : mlp.params()) {
    p.RegisterPostAccumulateGradHook([&fired](const Variable& leaf) { fired.push_back(leaf.name()); });
  }
  Backward(mlp.Loss());
  EXPECT_EQ(fired, (std::vector<std::string>{"2.weight", "2.bias", "0.weight", "0.bias"}));
  Backward(mlp.Loss());
  EXPECT_EQ(fired, (std::vector<std::string>{"2.weight", "2.bias", "0.weight", "0.bias", "2.weight", "2.bias",
                                              "0.weight", "0.bias"}));
}

TEST(Backward, LastLayerHooksFireBeforeEarlierLayersAreDifferentiated) {
  // What lets DDP overlap communication with backward: the hook of the last layer runs while the first
  // layer has no gradient yet.
  TinyMlp mlp;
  bool first_layer_done_when_last_layer_hook_ran = true;
  mlp.w2.RegisterPostAccumulateGradHook([&](const Variable& leaf) {
    EXPECT_TRUE(leaf.grad().defined());
    first_layer_done_when_last_layer_hook_ran = mlp.w1.grad().defined();
  });
  Backward(mlp.Loss());
  EXPECT_FALSE(first_layer_done_when_last_layer_hook_ran);
  EXPECT_TRUE(mlp.w1.grad().defined());
}

TEST(Backward, LeafUsedTwiceGetsItsHookOnlyAfterBothContributions) {
  // L = sum(3 w) + sum(relu(w) * w) with w > 0, so dL/dw = 3 + 2 w. The two contributions arrive from
  // different branches at different times; the hook must see their sum, once.
  const Variable w(Random({4, 5}, 21, 0.5, 2.0), /*requires_grad=*/true, "w");
  std::vector<float> expected = w.data().ToVector<float>();
  for (float& v : expected) v = 3 + 2 * v;
  int calls = 0;
  w.RegisterPostAccumulateGradHook([&](const Variable& leaf) {
    ++calls;
    ExpectNear(leaf.grad().ToVector<float>(), expected);
  });
  Backward(Sum(Scale(w, 3.0)) + Sum(Relu(w) * w));
  EXPECT_EQ(calls, 1);
}

TEST(Backward, HooksDoNotFireForLeavesTheGraphDoesNotReach) {
  TinyMlp mlp;
  const Variable unused = Param({2}, 31, "unused");
  int calls = 0;
  unused.RegisterPostAccumulateGradHook([&](const Variable&) { ++calls; });
  Backward(mlp.Loss());
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Backward, RemovedHookDoesNotFire) {
  TinyMlp mlp;
  int kept = 0, removed = 0;
  mlp.w1.RegisterPostAccumulateGradHook([&](const Variable&) { ++kept; });
  const HookHandle h = mlp.w1.RegisterPostAccumulateGradHook([&](const Variable&) { ++removed; });
  mlp.w1.RemovePostAccumulateGradHook(h);
  Backward(mlp.Loss());
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(removed, 0);
}

TEST(Backward, GradSetToAViewStaysAViewAfterAccumulation) {
  // DDP's layout: the parameter's .grad is a slice of a flat bucket buffer.
  TinyMlp mlp;
  Tensor bucket = Tensor::Zeros({40});
  const Tensor view = bucket.Rows(5, 5 + 18).View({3, 6});
  mlp.w2.set_grad(view);
  Backward(mlp.Loss());
  ASSERT_TRUE(mlp.w2.grad().SharesStorageWith(bucket));
  EXPECT_EQ(mlp.w2.grad().data_ptr(), view.data_ptr());
  const std::vector<float> once = mlp.w2.grad().ToVector<float>();

  // The same gradient computed without a view, for reference.
  TinyMlp reference;
  Backward(reference.Loss());
  ExpectNear(once, reference.w2.grad().ToVector<float>());

  Backward(mlp.Loss());
  EXPECT_EQ(mlp.w2.grad().data_ptr(), view.data_ptr());
  const std::vector<float> all = bucket.ToVector<float>();
  for (int i = 0; i < 40; ++i) {
    const bool inside = i >= 5 && i < 23;
    EXPECT_FLOAT_EQ(all[i], inside ? 2 * once[i - 5] : 0.0f) << "bucket element " << i;
  }
}

TEST(Backward, FreshGradientsGoIntoTheirDestinationAndStayThereAfterSetToNone) {
  // DDP's views as destinations: weights (written by Linear's GEMM) and biases (copied by
  // AccumulateGrad) land in a flat buffer, also after ZeroGrad(set_to_none), and accumulate there.
  TinyMlp mlp, reference;
  Tensor bucket = Tensor::Full({70}, 7.0);  // garbage outside and inside the views: must be overwritten
  const std::vector<Variable> params = mlp.params();
  std::vector<Tensor> views;
  int64_t at = 1;
  for (const Variable& p : params) {
    views.push_back(bucket.Rows(at, at + p.numel()).View(p.shape()));
    p.set_grad_destination(views.back());
    at += p.numel() + 1;
  }
  Backward(reference.Loss());
  for (int round = 0; round < 3; ++round) {
    ZeroGrad(params, /*set_to_none=*/true);
    Backward(mlp.Loss());
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_TRUE(params[i].grad().defined()) << params[i].name();
      EXPECT_EQ(params[i].grad().data_ptr(), views[i].data_ptr()) << params[i].name() << " is not in its destination";
      ExpectNear(params[i].grad().ToVector<float>(), reference.params()[i].grad().ToVector<float>());
    }
  }
  // With the gradient defined the destination plays no part: the next backward adds.
  Backward(mlp.Loss());
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> twice = reference.params()[i].grad().ToVector<float>();
    for (float& g : twice) g *= 2;
    ExpectNear(params[i].grad().ToVector<float>(), twice);
  }
  EXPECT_EQ(bucket.ToVector<float>()[0], 7.0f);  // outside every view: untouched
  // Without a destination a fresh gradient is a tensor of its own again.
  mlp.w2.set_grad_destination(Tensor());
  ZeroGrad(params, /*set_to_none=*/true);
  Backward(mlp.Loss());
  EXPECT_FALSE(mlp.w2.grad().SharesStorageWith(bucket));
}

TEST(VariableDeathTest, GradDestinationMustMatchTheData) {
  const Variable w = Param({3, 6}, 13, "w");
  EXPECT_DEATH(w.set_grad_destination(Tensor::Zeros({6, 3})), "does not match the data of");
}

TEST(Backward, WeightUsedByTwoLinearsAccumulatesBothIntoADefinedGrad) {
  // With .grad defined, a weight with a single contributor gets its GEMM written straight into .grad;
  // one used twice must not: both contributions are summed first. Compare against fresh gradients.
  const Variable x(Random({4, 6}, 81));
  const Variable w = Param({6, 6}, 82, "w"), v = Param({2, 6}, 83, "v");
  auto loss = [&] { return Sum(Linear(Relu(Linear(Relu(Linear(x, w, Variable())), w, Variable())), v, Variable())); };
  Backward(loss());
  const std::vector<float> w_once = w.grad().ToVector<float>(), v_once = v.grad().ToVector<float>();
  const Tensor w_view = w.grad(), v_view = v.grad();
  ZeroGrad({w, v}, /*set_to_none=*/false);
  Backward(loss());
  Backward(loss());
  EXPECT_EQ(w.grad().data_ptr(), w_view.data_ptr());
  EXPECT_EQ(v.grad().data_ptr(), v_view.data_ptr());
  std::vector<float> w_twice = w_once, v_twice = v_once;
  for (float& g : w_twice) g *= 2;
  for (float& g : v_twice) g *= 2;
  ExpectNear(w.grad().ToVector<float>(), w_twice);
  ExpectNear(v.grad().ToVector<float>(), v_twice);
}

// The extension point (engine.h, point 5), seen from an op: TripleInto(w) = 3 * w records what its
// backward was offered for w and, when offered a slot, fills it itself and returns no gradient for w.
struct Offered {
  Tensor add, write;  // undefined when not offered
};
Variable TripleInto(const Variable& w, std::vector<Offered>& seen) {
  return Record("TripleInto", ops::Scale(w.data(), 3.0), {w}, [&seen](const Tensor& g, const NeedsGrad& needs) {
    seen.push_back({});
    if (needs.accumulate_into(0) != nullptr) seen.back().add = *needs.accumulate_into(0);
    if (needs.write_into(0) != nullptr) seen.back().write = *needs.write_into(0);
    Grads grads(1);
    if (const Tensor* add = needs.accumulate_into(0)) {
      Tensor into = *add;
      ops::AddInto(into, g, 3.0);
    } else if (const Tensor* write = needs.write_into(0)) {
      Tensor into = *write;
      ops::CopyInto(into, ops::Scale(g, 3.0));
    } else {
      grads[0] = ops::Scale(g, 3.0);
    }
    return grads;
  });
}

TEST(Backward, ASoleContributorIsOfferedTheLeafsSlotAndMayFillItItself) {
  const Variable w = Param({5, 3}, 91, "w");
  const Tensor seed = Random({5, 3}, 92);
  int hooks = 0;
  w.RegisterPostAccumulateGradHook([&hooks](const Variable&) { ++hooks; });
  std::vector<float> expected = seed.ToVector<float>();
  for (float& v : expected) v *= 3;
  std::vector<Offered> seen;

  // No .grad, no destination: nothing to offer; the returned gradient is stored.
  Backward(TripleInto(w, seen), seed);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_FALSE(seen[0].add.defined());
  EXPECT_FALSE(seen[0].write.defined());
  ExpectNear(w.grad().ToVector<float>(), expected);

  // .grad defined: offered to add into (what Linear's GEMM does with beta = 1).
  const Tensor grad = w.grad();
  Backward(TripleInto(w, seen), seed);
  ASSERT_EQ(seen.size(), 2u);
  ASSERT_TRUE(seen[1].add.defined());
  EXPECT_EQ(seen[1].add.data_ptr(), grad.data_ptr());
  EXPECT_FALSE(seen[1].write.defined());
  EXPECT_EQ(w.grad().data_ptr(), grad.data_ptr());
  std::vector<float> twice = expected;
  for (float& v : twice) v *= 2;
  ExpectNear(w.grad().ToVector<float>(), twice);

  // .grad cleared, a destination set: offered to overwrite (beta = 0); the destination becomes .grad.
  Tensor bucket = Tensor::Full({20}, 5.0);
  const Tensor destination = bucket.Rows(2, 17).View({5, 3});
  w.set_grad_destination(destination);
  w.set_grad(Tensor());
  Backward(TripleInto(w, seen), seed);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen[2].add.defined());
  ASSERT_TRUE(seen[2].write.defined());
  EXPECT_EQ(seen[2].write.data_ptr(), destination.data_ptr());
  EXPECT_EQ(w.grad().data_ptr(), destination.data_ptr());
  ExpectNear(w.grad().ToVector<float>(), expected);
  EXPECT_EQ(hooks, 3) << "the hooks run once per backward whoever wrote the gradient";
}

TEST(Backward, ALeafWithTwoContributorsIsOfferedNoSlot) {
  // Point 2: both contributions are summed before the leaf sees them, so neither op may write there.
  const Variable w = Param({4, 2}, 93, "w");
  w.set_grad(Tensor::Zeros({4, 2}));
  std::vector<Offered> seen;
  Backward(Sum(Add(TripleInto(w, seen), TripleInto(w, seen))));
  ASSERT_EQ(seen.size(), 2u);
  for (const Offered& o : seen) {
    EXPECT_FALSE(o.add.defined());
    EXPECT_FALSE(o.write.defined());
  }
  for (float v : w.grad().ToVector<float>()) EXPECT_FLOAT_EQ(v, 6.0f);
}

TEST(LinearBackward, WritesTheWeightGradientStraightIntoTheSlotItIsOffered) {
  // What keeps DDP's bucket views copy-free: offered the weight's slot, Linear's backward runs its dw GEMM
  // into it (beta 0 to write, beta 1 to add) and returns no separate weight gradient.
  const Variable x(Random({7, 5}, 94));
  const Variable w = Param({3, 5}, 95, "w");
  const Tensor g = Random({7, 3}, 96);
  const std::vector<float> dw = ops::MatMul(g, x.data(), /*trans_a=*/true, /*trans_b=*/false).ToVector<float>();
  for (const bool add : {false, true}) {
    const Variable y = Linear(x, w, Variable());
    Tensor slot = Tensor::Full({3, 5}, 2.0);
    LeafSlots slots(y.grad_fn()->next().size());
    slots[1] = {slot, add};
    const Grads out = y.grad_fn()->Apply({g, /*exclusive=*/false, slots});
    EXPECT_FALSE(out[1].defined()) << "add=" << add << ": dw came back as a separate tensor";
    std::vector<float> expected = dw;
    for (float& v : expected) v += add ? 2.0f : 0.0f;
    ExpectNear(slot.ToVector<float>(), expected);
  }
}

TEST(Backward, LeavesSharingOneIncomingGradientGetSeparateTensors) {
  // Add's backward hands the same tensor to both inputs. If both leaves kept it, the next in-place
  // accumulation into one would change the other.
  const Variable a = Param({3, 4}, 41, "a"), b = Param({3, 4}, 42, "b");
  Backward(Sum(a + b));
  EXPECT_FALSE(a.grad().SharesStorageWith(b.grad()));
  Backward(Sum(a + b));
  for (float v : a.grad().ToVector<float>()) EXPECT_FLOAT_EQ(v, 2.0f);
  for (float v : b.grad().ToVector<float>()) EXPECT_FLOAT_EQ(v, 2.0f);
}

TEST(Backward, SeedGradientWeightsANonScalarRootAndIsNotKept) {
  const Variable x = Param({3, 4}, 51, "x");
  const Tensor seed = Random({3, 4}, 52);
  Backward(View(x, {4, 3}), seed.View({4, 3}));  // View passes the seed straight through to x
  EXPECT_FALSE(x.grad().SharesStorageWith(seed));
  ExpectNear(x.grad().ToVector<float>(), seed.ToVector<float>(), 0.0f);

  const Variable y = Scale(x, 2.0);
  Backward(y, seed);
  std::vector<float> expected = seed.ToVector<float>();
  for (float& v : expected) v *= 3;  // 1x from the first backward, 2x from this one
  ExpectNear(x.grad().ToVector<float>(), expected);
}

TEST(Backward, RetainGraphAllowsASecondBackward) {
  TinyMlp mlp;
  const Variable loss = mlp.Loss();
  Backward(loss, Tensor(), /*retain_graph=*/true);
  const std::vector<float> once = mlp.b1.grad().ToVector<float>();
  Backward(loss);
  std::vector<float> twice = once;
  for (float& v : twice) v *= 2;
  ExpectNear(mlp.b1.grad().ToVector<float>(), twice);
}

TEST(BackwardDeathTest, SecondBackwardThroughAFreedGraphStops) {
  TinyMlp mlp;
  const Variable loss = mlp.Loss();
  Backward(loss);
  EXPECT_DEATH(Backward(loss), "backward through the graph a second time.*retain_graph=true");
}

TEST(BackwardDeathTest, NonScalarRootWithoutSeedStops) {
  const Variable x = Param({3, 4}, 61, "x");
  EXPECT_DEATH(Backward(Scale(x, 2.0)), "one-element root.*\\[3, 4\\].*seed");
}

TEST(BackwardDeathTest, RootThatDoesNotRequireGradStops) {
  const Variable x(Random({3}, 62));  // requires_grad = false
  EXPECT_DEATH(Backward(Sum(x)), "does not require grad");
}

TEST(BackwardDeathTest, SeedOfTheWrongShapeStops) {
  const Variable x = Param({3, 4}, 63, "x");
  EXPECT_DEATH(Backward(Scale(x, 2.0), Tensor::Zeros({4, 3})), "seed gradient.*does not match");
}

TEST(VariableDeathTest, GradOfAVariableThatDoesNotRequireGradCannotBeSet) {
  const Variable x(Random({3}, 64), /*requires_grad=*/false, "x");
  EXPECT_DEATH(x.set_grad(Tensor::Zeros({3})), "'x' does not require grad");
}

TEST(VariableDeathTest, HooksOnlyOnLeavesThatRequireGrad) {
  const Variable x = Param({3}, 65, "x");
  const Variable y = Scale(x, 2.0);
  EXPECT_DEATH(y.RegisterPostAccumulateGradHook([](const Variable&) {}), "not a leaf");
}

TEST(NoGradGuard, OpsInsideRecordNothingAndTheModeIsRestored) {
  const Variable x = Param({2, 3}, 71, "x");
  {
    NoGradGuard outer;
    {
      NoGradGuard inner;
      EXPECT_FALSE(GradModeEnabled());
    }
    EXPECT_FALSE(GradModeEnabled());
    const Variable y = Relu(x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(GradModeEnabled());
  const Variable y = Relu(x);
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_STREQ(y.grad_fn()->name(), "Relu");
}

TEST(ZeroGrad, SetToNoneDropsAndZeroFillKeepsTheSameMemory) {
  TinyMlp mlp;
  Backward(mlp.Loss());
  const void* before = mlp.w1.grad().data_ptr();
  ZeroGrad(mlp.params(), /*set_to_none=*/false);
  EXPECT_EQ(mlp.w1.grad().data_ptr(), before);
  for (float v : mlp.w1.grad().ToVector<float>()) EXPECT_EQ(v, 0.0f);
  ZeroGrad(mlp.params());
  for (const Variable& p : mlp.params()) EXPECT_FALSE(p.grad().defined());
}

TEST(Backward, InputsThatDoNotRequireGradGetNoGradient) {
  TinyMlp mlp;
  Backward(mlp.Loss());
  EXPECT_FALSE(mlp.x.grad().defined());
  for (const Variable& p : mlp.params()) EXPECT_TRUE(p.grad().defined()) << p.name();
}

// QueueCallback (added for DDP's reducer): queued from a hook, runs once after every hook of the backward,
// before Backward returns; a callback may queue another.
TEST(QueueCallback, RunsOnceAfterTheLastHookBeforeBackwardReturns) {
  TinyMlp mlp;
  std::vector<std::string> events;
  for (const Variable& p : mlp.params()) {
    p.RegisterPostAccumulateGradHook([&events](const Variable& leaf) {
      events.push_back(leaf.name());
      if (events.size() == 1) {
        QueueCallback([&events] {
          events.push_back("end");
          QueueCallback([&events] { events.push_back("end2"); });
        });
      }
    });
  }
  EXPECT_FALSE(InBackward());
  Backward(mlp.Loss());
  EXPECT_FALSE(InBackward());
  const std::vector<std::string> expected = {"2.weight", "2.bias", "0.weight", "0.bias", "end", "end2"};
  EXPECT_EQ(events, expected);
  events.clear();
  Backward(mlp.Loss());  // the list starts empty again for each backward
  EXPECT_EQ(events, expected);
}

}  // namespace
}  // namespace tinyddp::autograd
