// DistributedDataParallel's behaviours on real processes with Gloo: gradients are bucket views holding the
// average, buckets launch in one order on every rank whatever order gradients arrive in, the one-time
// rebuild follows rank 0's observed order, no_sync accumulation, unused parameters (the error and
// find_unused_parameters), the bf16 hook, and the parameter check at construction. The N-rank training
// equivalence lives in tests/ddp_equivalence/.
#include "dist/ddp/bf16_compress_hook.h"
#include "dist/ddp/ddp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/testing/ddp_testing.h"
#include "dist/store/hash_store.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/ddp/reducer.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "tensor/ops.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using Grads = std::map<std::string, Tensor>;

nn::LinearOptions Init(uint64_t seed) {
  nn::LinearOptions o;
  o.seed = seed;
  return o;
}

// Three square layers a, b, c (registered in that order) applied in the order given: a rank-dependent
// order makes gradients, and so buckets, become ready in a different order on each rank.
class Permuted : public nn::Module {
 public:
  explicit Permuted(std::vector<int> order) : order_(std::move(order)) {
    layers_.push_back(RegisterModule("a", std::make_shared<nn::Linear>(7, 7, Init(1))));
    layers_.push_back(RegisterModule("b", std::make_shared<nn::Linear>(7, 7, Init(2))));
    layers_.push_back(RegisterModule("c", std::make_shared<nn::Linear>(7, 7, Init(3))));
  }
  Variable Forward(const Variable& x) override {
    Variable h = x;
    for (int i : order_) h = autograd::Relu((*layers_[i])(h));
    return h;
  }
  std::string ToString() const override { return "Permuted"; }

 private:
  std::vector<int> order_;
  std::vector<std::shared_ptr<nn::Linear>> layers_;
};

// A trunk and three heads; the forward uses the trunk and one head. "never" is used by no rank.
class TwoHeads : public nn::Module {
 public:
  explicit TwoHeads(int head) : head_(head) {
    trunk_ = RegisterModule("trunk", std::make_shared<nn::Linear>(6, 8, Init(11)));
    heads_.push_back(RegisterModule("head_a", std::make_shared<nn::Linear>(8, 4, Init(12))));
    heads_.push_back(RegisterModule("head_b", std::make_shared<nn::Linear>(8, 4, Init(13))));
    heads_.push_back(RegisterModule("never", std::make_shared<nn::Linear>(8, 4, Init(14))));
  }
  Variable Forward(const Variable& x) override { return (*heads_[head_])(autograd::Relu((*trunk_)(x))); }
  std::string ToString() const override { return "TwoHeads"; }

 private:
  int head_;
  std::shared_ptr<nn::Linear> trunk_;
  std::vector<std::shared_ptr<nn::Linear>> heads_;
};

Variable Loss(nn::Module& model, const Batch& b) {
  return autograd::CrossEntropy(model.Forward(Variable(b.x)), b.labels);
}
Variable Loss(DistributedDataParallel& ddp, const Batch& b) {
  return autograd::CrossEntropy(ddp.Forward(Variable(b.x)), b.labels);
}

// The gradients one process gets from `model` on `b` (accumulated onto whatever .grad holds).
Grads GradientsOf(nn::Module& model, const Batch& b) {
  autograd::Backward(Loss(model, b));
  Grads g;
  for (const auto& [name, p] : model.NamedParameters()) {
    if (p.grad().defined()) g[name] = p.grad().Clone();
  }
  return g;
}

// The average over ranks of per-rank gradients, a missing gradient counting as zero.
Grads Average(const std::vector<Grads>& per_rank) {
  Grads sum;
  for (const Grads& g : per_rank) {
    for (const auto& [name, t] : g) {
      if (sum.count(name) == 0) sum[name] = Tensor::Zeros(t.shape(), t.dtype());
      ops::AddInto(sum[name], t);
    }
  }
  for (auto& [name, t] : sum) ops::ScaleInPlace(t, 1.0 / static_cast<double>(per_rank.size()));
  return sum;
}

void ExpectGradientsEqual(const nn::Module& model, const Grads& expected, const std::string& when) {
  for (const auto& [name, p] : model.NamedParameters()) {
    auto it = expected.find(name);
    if (it == expected.end()) {
      EXPECT_FALSE(p.grad().defined()) << "'" << name << "' should have no gradient " << when;
      continue;
    }
    ASSERT_TRUE(p.grad().defined()) << "'" << name << "' has no gradient " << when;
    ddp_testing::ExpectTensorNear(p.grad(), it->second, 1e-6, 1e-5, absl::StrCat("grad of '", name, "' ", when));
  }
}

Batch RankBatch(int rank, int64_t features, int64_t classes, uint64_t salt = 0) {
  return ddp_testing::MakeBatch(5, features, classes, 500 + 17 * rank + salt);
}

std::vector<std::string> Flatten(const std::vector<std::vector<std::string>>& buckets) {
  std::vector<std::string> all;
  for (const auto& b : buckets) all.insert(all.end(), b.begin(), b.end());
  return all;
}

// --- Gradients and buckets --------------------------------------------------------------------------

TEST(DistributedDataParallel, GradientsAreViewsIntoTheBucketsAndHoldTheAverage) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 3;
    auto model = nn::MLP({13, 17, 11, 5}, mo);
    DdpOptions options;
    options.first_bucket_bytes = 256;
    options.bucket_cap_bytes = 700;
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const Reducer& reducer = (*ddp)->reducer();

    // Reverse registration order; the first bucket closes past 256 bytes, later ones past 700.
    const std::vector<std::vector<std::string>> expected = {
        {"4.bias", "4.weight", "2.bias"}, {"2.weight"}, {"0.bias", "0.weight"}};
    EXPECT_EQ(reducer.BucketParameterNames(), expected);
    EXPECT_EQ(reducer.BucketBytes(0), 4 * (5 + 55 + 11));

    std::vector<Grads> local;
    for (int r = 0; r < ctx.world_size; ++r) {
      auto copy = nn::MLP({13, 17, 11, 5}, mo);
      local.push_back(GradientsOf(*copy, RankBatch(r, 13, 5)));
    }
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 13, 5)));
    ExpectGradientsEqual(*model, Average(local), "after one DDP backward");
    for (const auto& [name, p] : model->NamedParameters()) {
      bool in_a_bucket = false;
      for (int b = 0; b < reducer.num_buckets(); ++b) in_a_bucket |= p.grad().SharesStorageWith(reducer.BucketBuffer(b));
      EXPECT_TRUE(in_a_bucket) << "'" << name << "'.grad is not a view into a bucket";
    }
  });
}

TEST(DistributedDataParallel, BucketTableNamesEachBucketsBytesParametersAndPath) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 3;
    auto model = nn::MLP({13, 17, 11, 5}, mo);
    DdpOptions options;
    options.first_bucket_bytes = 256;
    options.bucket_cap_bytes = 700;
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    // The default hook, AllReduceHook, takes Gloo's all_reduce for every bucket.
    for (int b = 0; b < 3; ++b) EXPECT_STREQ((*ddp)->BucketPath(b), "Gloo all_reduce") << "bucket " << b;
    const std::string table = (*ddp)->BucketTable();
    EXPECT_TRUE(absl::StrContains(table, "bucket")) << table;
    EXPECT_TRUE(absl::StrContains(table, "path")) << table;
    // Bucket 0: 4.bias, 4.weight, 2.bias = 4 * (5 + 55 + 11) = 284 bytes, 3 parameters.
    EXPECT_TRUE(absl::StrContains(table, "     0            284       3  Gloo all_reduce")) << table;
    EXPECT_TRUE(absl::StrContains(table, "4.bias, 4.weight, 2.bias")) << table;
    EXPECT_TRUE(absl::StrContains(table, "     1            748       1  Gloo all_reduce")) << table;
    EXPECT_TRUE(absl::StrContains(table, "rebuilt once after the first step")) << table;

    // A custom hook names its own path.
    DdpOptions bf16 = options;
    bf16.comm_hook = Bf16CompressHook();
    auto other = nn::MLP({13, 17, 11, 5}, mo);
    auto compressed = DistributedDataParallel::Create(*other, pg, bf16);
    ASSERT_TRUE(compressed.ok()) << compressed.status();
    EXPECT_STREQ((*compressed)->BucketPath(0), "Gloo all_reduce, bf16");
  });
}

TEST(Reducer, LaunchesBucketsInTheSameOrderOnEveryRank) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    // Each rank runs the layers in another order, so its buckets (one layer each) become ready in another
    // order. Mismatched collectives would pair different buckets across ranks and average wrong numbers.
    const std::vector<std::vector<int>> orders = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}};
    Permuted model(orders[ctx.rank]);
    DdpOptions options;
    options.first_bucket_bytes = 4 * (49 + 7);  // every layer (weight + bias) in its own bucket
    options.bucket_cap_bytes = 4 * (49 + 7);
    auto ddp = DistributedDataParallel::Create(model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const Reducer& reducer = (*ddp)->reducer();
    ASSERT_EQ(reducer.num_buckets(), 3);

    std::vector<Grads> local;
    for (int r = 0; r < ctx.world_size; ++r) {
      Permuted copy(orders[r]);
      local.push_back(GradientsOf(copy, RankBatch(r, 7, 7)));
    }
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 7, 7)));
    EXPECT_EQ(reducer.last_launch_order(), (std::vector<int>{0, 1, 2}));
    ExpectGradientsEqual(model, Average(local), "with rank-dependent gradient order");

    // The rebuild (at the next forward) follows rank 0's observed order on every rank: layers a, b, c ran
    // in that order there, so their gradients arrived c, b, a (weight before bias within a layer).
    const std::vector<std::string> rank0_order = {"c.weight", "c.bias", "b.weight", "b.bias", "a.weight", "a.bias"};
    if (ctx.rank == 0) {
      EXPECT_EQ(reducer.LastReadyOrder(), rank0_order);
    }
    EXPECT_FALSE(reducer.buckets_rebuilt());
    model.ZeroGrad();
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 7, 7, /*salt=*/1)));
    EXPECT_TRUE(reducer.buckets_rebuilt());
    EXPECT_EQ(Flatten(reducer.BucketParameterNames()), rank0_order);
    EXPECT_EQ(reducer.last_launch_order(), (std::vector<int>{0, 1, 2}));
    std::vector<Grads> local2;
    for (int r = 0; r < ctx.world_size; ++r) {
      Permuted copy(orders[r]);
      local2.push_back(GradientsOf(copy, RankBatch(r, 7, 7, 1)));
    }
    ExpectGradientsEqual(model, Average(local2), "after the rebuild");
  });
}

TEST(Reducer, ABucketOrderFromACheckpointStartsRebuiltInThatLayoutAndSumsToTheSameBits) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    DdpOptions options;
    options.first_bucket_bytes = 4 * (49 + 7);  // every layer (weight + bias) in its own bucket
    options.bucket_cap_bytes = 4 * (49 + 7);
    // The run that never stopped: its first backward records the gradient order, the next forward rebuilds.
    Permuted model({0, 1, 2});
    auto ddp = DistributedDataParallel::Create(model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const Reducer& reducer = (*ddp)->reducer();
    EXPECT_TRUE(reducer.LayoutOrder().empty()) << "nothing to record before the first step";
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 7, 7)));
    const std::vector<std::string> observed = {"c.weight", "c.bias", "b.weight", "b.bias", "a.weight", "a.bias"};
    EXPECT_EQ(reducer.LayoutOrder(), observed) << "pending: the order the next forward rebuilds from";
    EXPECT_NE(Flatten(reducer.BucketParameterNames()), observed) << "the first step's layout is another";
    model.ZeroGrad();
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 7, 7, /*salt=*/1)));
    EXPECT_EQ(reducer.LayoutOrder(), observed);

    // A resumed run: the same weights, the recorded order. It starts rebuilt, in the same layout, and its
    // first step gives the very bits the continuing run's step gives.
    Permuted resumed({0, 1, 2});
    DdpOptions from_checkpoint = options;
    from_checkpoint.bucket_order = reducer.LayoutOrder();
    auto again = DistributedDataParallel::Create(resumed, pg, from_checkpoint);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE((*again)->reducer().buckets_rebuilt());
    EXPECT_EQ((*again)->reducer().BucketParameterNames(), reducer.BucketParameterNames());
    model.ZeroGrad();
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 7, 7, /*salt=*/2)));
    autograd::Backward(Loss(**again, RankBatch(ctx.rank, 7, 7, /*salt=*/2)));
    EXPECT_EQ((*again)->reducer().BucketParameterNames(), reducer.BucketParameterNames()) << "no second rebuild";
    const auto continuing = model.NamedParameters(), restarted = resumed.NamedParameters();
    for (size_t i = 0; i < continuing.size(); ++i) {
      EXPECT_EQ(continuing[i].second.grad().ToVector<float>(), restarted[i].second.grad().ToVector<float>())
          << continuing[i].first;
    }

    // An order that is not this model's is refused, naming both lists.
    Permuted other({0, 1, 2});
    DdpOptions wrong = options;
    wrong.bucket_order = {"c.weight", "b.weight"};
    auto refused = DistributedDataParallel::Create(other, pg, wrong);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "bucket_order lists 2 parameters")) << refused.status();
  });
}

// The seam a comm hook that keeps per-bucket state uses (the copy engines register the buffers there).
TEST(CommHooks, OnBucketsRebuiltSeesEachLayoutsFlatBuffersOnceAndItsErrorFailsCreate) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    Permuted model({0, 1, 2});
    DdpOptions options;
    options.first_bucket_bytes = 4 * (49 + 7);  // every layer (weight + bias) in its own bucket
    options.bucket_cap_bytes = 4 * (49 + 7);
    std::vector<std::vector<Tensor>> seen;  // the buffers of each call
    options.comm_hook = AllReduceHook();
    options.comm_hook.on_buckets_rebuilt = [&seen](const std::vector<Tensor>& buffers) {
      seen.push_back(buffers);
      return absl::OkStatus();
    };
    auto ddp = DistributedDataParallel::Create(model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const Reducer& reducer = (*ddp)->reducer();
    auto expect_current_buffers = [&reducer](const std::vector<Tensor>& buffers, const std::string& when) {
      ASSERT_EQ(static_cast<int>(buffers.size()), reducer.num_buckets()) << when;
      for (int b = 0; b < reducer.num_buckets(); ++b) {
        EXPECT_TRUE(buffers[b].SharesStorageWith(reducer.BucketBuffer(b))) << "bucket " << b << " " << when;
        EXPECT_EQ(buffers[b].numel(), reducer.BucketBuffer(b).numel()) << "bucket " << b << " " << when;
      }
    };
    ASSERT_EQ(seen.size(), 1u) << "called once Create has built the buckets";
    expect_current_buffers(seen[0], "after Create");

    // The second forward rebuilds the buckets in the observed order (weight before bias): a new layout.
    for (int step = 0; step < 3; ++step) {
      model.ZeroGrad();
      autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 7, 7, step)));
    }
    ASSERT_TRUE(reducer.buckets_rebuilt());
    ASSERT_EQ(seen.size(), 2u) << "called again after the rebuild, and not for steps that build nothing";
    expect_current_buffers(seen[1], "after the rebuild");
    EXPECT_FALSE(seen[1][0].SharesStorageWith(seen[0][0])) << "the rebuilt buckets are new buffers";

    // An error there (a peer that never answered the hook's exchange) fails Create, naming the seam.
    DdpOptions failing = options;
    failing.comm_hook.on_buckets_rebuilt = [](const std::vector<Tensor>&) {
      return absl::UnavailableError("the peer is gone");
    };
    Permuted other({0, 1, 2});
    auto failed = DistributedDataParallel::Create(other, pg, failing);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
    EXPECT_TRUE(absl::StrContains(failed.status().message(), "on_buckets_rebuilt")) << failed.status();
    EXPECT_TRUE(absl::StrContains(failed.status().message(), "the peer is gone")) << failed.status();
  });
}

TEST(DistributedDataParallel, NoSyncAccumulatesLocallyAndTheNextSyncedBackwardAveragesTheSums) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 5;
    auto model = nn::MLP({9, 6, 4}, mo);
    auto ddp = DistributedDataParallel::Create(*model, pg);
    ASSERT_TRUE(ddp.ok()) << ddp.status();

    // Two micro-batches under NoSync: the gradients are this rank's own sums, nothing communicated.
    auto mine = nn::MLP({9, 6, 4}, mo);
    {
      auto no_sync = (*ddp)->NoSync();
      for (int micro = 0; micro < 2; ++micro) {
        autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 9, 4, micro)));
        autograd::Backward(Loss(*mine, RankBatch(ctx.rank, 9, 4, micro)));
      }
    }
    Grads local_sum;
    for (const auto& [name, p] : mine->NamedParameters()) local_sum[name] = p.grad().Clone();
    ExpectGradientsEqual(*model, local_sum, "after two NoSync backwards");
    EXPECT_EQ((*ddp)->reducer().num_synced_backwards(), 0);

    // The third, synchronised backward averages the three-micro-batch sums over the ranks.
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 9, 4, 2)));
    std::vector<Grads> sums;
    for (int r = 0; r < ctx.world_size; ++r) {
      auto copy = nn::MLP({9, 6, 4}, mo);
      for (int micro = 0; micro < 3; ++micro) autograd::Backward(Loss(*copy, RankBatch(r, 9, 4, micro)));
      Grads g;
      for (const auto& [name, p] : copy->NamedParameters()) g[name] = p.grad().Clone();
      sums.push_back(g);
    }
    ExpectGradientsEqual(*model, Average(sums), "after the synchronised backward");
    EXPECT_EQ((*ddp)->reducer().num_synced_backwards(), 1);
  });
}

// --- Unused parameters ------------------------------------------------------------------------------

TEST(DistributedDataParallelDeathTest, BackwardThatNeverReachesAParameterStopsNamingItAndTheOption) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto pg = ProcessGroupGloo::Create(std::make_shared<HashStore>(), 0, 1);
        if (!pg.ok()) std::abort();
        TwoHeads model(/*head=*/0);
        auto ddp = DistributedDataParallel::Create(model, std::shared_ptr<ProcessGroup>(std::move(*pg)));
        if (!ddp.ok()) std::abort();
        autograd::Backward(Loss(**ddp, RankBatch(0, 6, 4)));
      },
      "4 parameter\\(s\\) never received a gradient: head_b.weight, head_b.bias, never.weight, never.bias\\..*"
      "find_unused_parameters=true");
}

TEST(DistributedDataParallel, FindUnusedParametersAveragesWhatEachRankUsedAndLeavesUnusedOnesAlone) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    TwoHeads model(/*head=*/ctx.rank);  // rank 0 uses head_a, rank 1 head_b; nobody uses "never"
    DdpOptions options;
    options.find_unused_parameters = true;
    options.first_bucket_bytes = 1;
    options.bucket_cap_bytes = 64;
    auto ddp = DistributedDataParallel::Create(model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    for (int step = 0; step < 2; ++step) {
      model.ZeroGrad();
      autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 6, 4, step)));
      std::vector<Grads> local;
      for (int r = 0; r < ctx.world_size; ++r) {
        TwoHeads copy(r);
        local.push_back(GradientsOf(copy, RankBatch(r, 6, 4, step)));
      }
      // head_a: rank 0's gradient and rank 1's zero, averaged; "never": no gradient at all, as in PyTorch.
      ExpectGradientsEqual(model, Average(local), absl::StrCat("in step ", step));
    }
  });
}

// --- Communication hooks ----------------------------------------------------------------------------

TEST(CommHooks, Bf16CompressionIsCloseToTheFp32AverageAndIdenticalOnEveryRank) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 8;
    auto model = nn::MLP({21, 19, 6}, mo);
    DdpOptions options;
    options.comm_hook = Bf16CompressHook();
    options.first_bucket_bytes = 100;
    options.bucket_cap_bytes = 1000;
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    autograd::Backward(Loss(**ddp, RankBatch(ctx.rank, 21, 6)));

    std::vector<Grads> local;
    for (int r = 0; r < ctx.world_size; ++r) {
      auto copy = nn::MLP({21, 19, 6}, mo);
      local.push_back(GradientsOf(*copy, RankBatch(r, 21, 6)));
    }
    const Grads fp32 = Average(local);
    int64_t differing = 0;
    for (const auto& [name, p] : model->NamedParameters()) {
      // bf16 keeps 8 significant bits: every rank's gradient, each partial sum and the average are
      // rounded, each by up to 2^-9 of its size; so the error is bounded relative to the largest input.
      double largest = 0;
      for (const Grads& g : local) {
        for (float v : g.at(name).ToVector<float>()) largest = std::max(largest, static_cast<double>(std::fabs(v)));
      }
      ddp_testing::ExpectTensorNear(p.grad(), fp32.at(name), 1e-2 * largest, 1e-2,
                                    absl::StrCat("bf16 grad of '", name, "'"));
      const std::vector<float> a = p.grad().ToVector<float>(), e = fp32.at(name).ToVector<float>();
      for (size_t i = 0; i < a.size(); ++i) differing += a[i] != e[i];
      // Identical on every rank: gather the gradients and compare bits.
      Tensor all = Tensor::Empty({p.numel() * ctx.world_size});
      ASSERT_TRUE(pg->AllGather(all, p.grad().Flatten())->Wait().ok());
      for (int r = 0; r < ctx.world_size; ++r) {
        EXPECT_EQ(all.Rows(r * p.numel(), (r + 1) * p.numel()).ToVector<float>(), a)
            << "bf16 grad of '" << name << "' differs on rank " << r;
      }
    }
    EXPECT_GT(differing, 0) << "the gradients equal the fp32 average exactly: was anything compressed?";
  });
}

// --- Construction -----------------------------------------------------------------------------------

TEST(DistributedDataParallel, CreateNamesTheFirstMismatchedParameterAndTheRanksThatDiffer) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    // Rank 2 built its hidden layer with 9 units instead of 11: "2.weight" is the first difference.
    auto model = nn::MLP({13, 17, ctx.rank == 2 ? 9 : 11, 5});
    auto ddp = DistributedDataParallel::Create(*model, pg);
    ASSERT_FALSE(ddp.ok());
    const std::string message(ddp.status().message());
    EXPECT_EQ(ddp.status().code(), absl::StatusCode::kFailedPrecondition) << message;
    EXPECT_TRUE(absl::StrContains(message, "parameter #2: rank 0 has '2.weight' float32 [11, 17]")) << message;
    EXPECT_TRUE(absl::StrContains(message, "rank 2 has '2.weight' float32 [9, 17]")) << message;
    EXPECT_TRUE(absl::StrContains(message, "ranks differing from rank 0: 2)")) << message;
    EXPECT_FALSE(absl::StrContains(message, "rank 1 has")) << message;
  });
}

TEST(DistributedDataParallel, CreateCopiesRankZerosParametersToEveryRank) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 100 + ctx.rank;  // every rank initialised differently
    auto model = nn::MLP({5, 7, 3}, mo);
    nn::MlpOptions rank0;
    rank0.seed = 100;
    auto expected = nn::MLP({5, 7, 3}, rank0);
    auto ddp = DistributedDataParallel::Create(*model, pg);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ddp_testing::ExpectParametersNear(*model, *expected, 0, 0, "after Create");
  });
}

}  // namespace
}  // namespace tinyddp::dist
