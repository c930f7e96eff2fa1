// Distributed evaluation counts every test example exactly once, although the sampler pads each rank's
// shard with repeats: the all_reduced metrics over 2 and 3 real Gloo ranks equal one process scoring
// the whole test set.
#include "examples/internal/evaluate.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "tensor/ops.h"

namespace tinyddp::examples {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

TEST(EvalShard, EveryIndexAppearsOnExactlyOneRankOnce) {
  for (int64_t n : {0, 1, 2, 7, 10, 37, 100, 10000}) {
    for (int r : {1, 2, 3, 4, 7, 16}) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      int64_t padded_total = 0;
      for (int rank = 0; rank < r; ++rank) {
        const std::vector<int64_t> shard = EvalShardIndices(n, r, rank);
        EXPECT_EQ(static_cast<int64_t>(shard.size()), EvalShardSize(n, r, rank));
        for (int64_t i : shard) ++seen[static_cast<size_t>(i)];
        // The shard is the sampler's list with its padded tail cut off.
        auto sampler = data::DistributedSampler::Create(n, {.num_replicas = r, .rank = rank, .shuffle = false});
        const std::vector<int64_t> full = sampler->Indices();
        padded_total += static_cast<int64_t>(full.size());
        EXPECT_TRUE(std::equal(shard.begin(), shard.end(), full.begin())) << n << " " << r << " " << rank;
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "n=" << n << " r=" << r;
      EXPECT_EQ(padded_total, (n + r - 1) / r * r);  // what counting the padding would have scored
    }
  }
}

// 37 examples (not a multiple of 2 or 3) of 11 features in 5 classes, random but the same everywhere.
data::TensorDataset TestSet() {
  Tensor x = Tensor::Empty({37, 11});
  ops::NormalInit(x, 0, 1, /*seed=*/77);
  std::vector<int64_t> labels(37);
  for (int i = 0; i < 37; ++i) labels[i] = (i * 7 + 3) % 5;
  return data::TensorDataset::Create(x, Tensor::FromVector<int64_t>(labels, {37}), 5).value();
}

// The reference: one process scores all 37 examples.
EvalSums Reference() {
  auto model = nn::MLP({11, 9, 5}, {.seed = 5});
  const data::TensorDataset test = TestSet();
  std::vector<int64_t> all(37);
  for (int i = 0; i < 37; ++i) all[i] = i;
  return EvaluateShard(*model, test, all, Device::CPU(), /*batch_size=*/8).value();
}

class EvalAcrossRanks : public ::testing::TestWithParam<int> {};

TEST_P(EvalAcrossRanks, AllReducedMetricsEqualScoringTheWholeSetOnce) {
  const EvalSums want = Reference();
  ASSERT_EQ(want.count, 37);
  ASSERT_GT(want.correct, 0);   // an untrained model still gets some right,
  ASSERT_LT(want.correct, 37);  // and some wrong: accuracy is a real fraction
  RunOnRanks(GetParam(), [want](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    auto model = nn::MLP({11, 9, 5}, {.seed = 5});
    const data::TensorDataset test = TestSet();
    const std::vector<int64_t> shard = EvalShardIndices(37, ctx.world_size, ctx.rank);
    absl::StatusOr<EvalSums> local = EvaluateShard(*model, test, shard, Device::CPU(), /*batch_size=*/4);
    ASSERT_TRUE(local.ok()) << local.status();
    absl::StatusOr<EvalMetrics> m = AllReduceEvalSums(**pg, Device::CPU(), *local);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->count, 37);
    EXPECT_DOUBLE_EQ(m->accuracy, want.correct / 37);
    EXPECT_NEAR(m->loss, want.loss_sum / 37, 1e-6);

    // The padded shards would have scored 38 or 39 predictions: the bug this guards against.
    auto sampler =
        data::DistributedSampler::Create(37, {.num_replicas = ctx.world_size, .rank = ctx.rank, .shuffle = false});
    absl::StatusOr<EvalSums> padded = EvaluateShard(*model, test, sampler->Indices(), Device::CPU());
    absl::StatusOr<EvalMetrics> wrong = AllReduceEvalSums(**pg, Device::CPU(), *padded);
    ASSERT_TRUE(wrong.ok());
    EXPECT_EQ(wrong->count, (37 + ctx.world_size - 1) / ctx.world_size * ctx.world_size);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, EvalAcrossRanks, ::testing::Values(2, 3));

}  // namespace
}  // namespace tinyddp::examples
