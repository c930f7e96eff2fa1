// DistributedSampler against PyTorch's documented semantics: the size formulas (computed here exactly as
// torch/utils/data/distributed.py writes them, with floating-point ceil), padding from the front,
// truncation, rank striding, coverage, disjointness and determinism; and pad = false (our addition, for
// training with uneven inputs): only real examples, shards at most one apart.
#include "data/distributed_sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "gtest/gtest.h"

namespace tinyddp::data {
namespace {

// PyTorch, literally: math.ceil((len - R) / R) if drop_last and len % R != 0 else math.ceil(len / R).
int64_t TorchNumSamples(int64_t n, int64_t r, bool drop_last) {
  if (drop_last && n % r != 0) return static_cast<int64_t>(std::ceil(static_cast<double>(n - r) / r));
  return static_cast<int64_t>(std::ceil(static_cast<double>(n) / r));
}

// PyTorch's __iter__ written out on a given global order, for comparison with ours.
std::vector<int64_t> TorchShard(std::vector<int64_t> indices, int64_t r, int64_t rank, bool drop_last) {
  const int64_t n = indices.size();
  const int64_t total = TorchNumSamples(n, r, drop_last) * r;
  if (!drop_last) {
    const int64_t padding = total - n;
    if (padding <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding);
    } else if (padding > 0) {
      const int64_t times = static_cast<int64_t>(std::ceil(static_cast<double>(padding) / n));
      std::vector<int64_t> repeated;
      for (int64_t t = 0; t < times; ++t) repeated.insert(repeated.end(), indices.begin(), indices.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding);
    }
  } else {
    indices.resize(total);
  }
  std::vector<int64_t> shard;
  for (int64_t i = rank; i < total; i += r) shard.push_back(indices[i]);
  return shard;
}

DistributedSampler Make(int64_t n, int64_t r, int64_t rank, bool shuffle, bool drop_last, uint64_t seed = 7) {
  absl::StatusOr<DistributedSampler> s = DistributedSampler::Create(
      n, {.num_replicas = r, .rank = rank, .shuffle = shuffle, .seed = seed, .drop_last = drop_last});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(DistributedSampler, SizesMatchPyTorchFormulasOverManyCombinations) {
  for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 10, 13, 16, 31, 64, 97, 100, 1000, 60000, 60001}) {
    for (int64_t r : {1, 2, 3, 4, 7, 8, 16, 33}) {
      for (bool drop_last : {false, true}) {
        for (int64_t rank : {int64_t{0}, r - 1, r / 2}) {
          DistributedSampler s = Make(n, r, rank, /*shuffle=*/true, drop_last);
          const int64_t expected = TorchNumSamples(n, r, drop_last);
          SCOPED_TRACE(testing::Message() << "N=" << n << " R=" << r << " rank=" << rank << " drop_last=" << drop_last);
          EXPECT_EQ(s.num_samples(), expected);
          EXPECT_EQ(s.total_size(), expected * r);
          EXPECT_EQ(static_cast<int64_t>(s.Indices().size()), expected);
        }
      }
    }
  }
}

TEST(DistributedSampler, UnshuffledShardsEqualPyTorchsIncludingWrapAroundPadding) {
  // N < R forces padding longer than the dataset (PyTorch's "repeat the list" branch).
  for (int64_t n : {1, 2, 3, 5, 9, 10, 11, 23}) {
    for (int64_t r : {1, 2, 3, 4, 7, 12}) {
      for (bool drop_last : {false, true}) {
        std::vector<int64_t> range(n);
        for (int64_t i = 0; i < n; ++i) range[i] = i;
        for (int64_t rank = 0; rank < r; ++rank) {
          EXPECT_EQ(Make(n, r, rank, /*shuffle=*/false, drop_last).Indices(), TorchShard(range, r, rank, drop_last))
              << "N=" << n << " R=" << r << " rank=" << rank << " drop_last=" << drop_last;
        }
      }
    }
  }
}

TEST(DistributedSampler, ShuffledShardsFollowPyTorchsPaddingAndStridingOfThePermutation) {
  for (int64_t n : {5, 17, 100}) {
    for (int64_t r : {2, 3, 8}) {
      for (bool drop_last : {false, true}) {
        for (int64_t epoch : {0, 3}) {
          const std::vector<int64_t> perm = RandomPermutation(n, 7 + epoch);
          for (int64_t rank = 0; rank < r; ++rank) {
            DistributedSampler s = Make(n, r, rank, /*shuffle=*/true, drop_last, /*seed=*/7);
            s.SetEpoch(epoch);
            EXPECT_EQ(s.Indices(), TorchShard(perm, r, rank, drop_last));
          }
        }
      }
    }
  }
}

TEST(DistributedSampler, ShardsCoverEveryIndexAndAreDisjointWhenEven) {
  for (int64_t n : {1, 6, 7, 13, 64, 1001}) {
    for (int64_t r : {1, 2, 3, 5, 8}) {
      for (bool drop_last : {false, true}) {
        std::map<int64_t, int> count;
        for (int64_t rank = 0; rank < r; ++rank) {
          DistributedSampler s = Make(n, r, rank, /*shuffle=*/true, drop_last);
          s.SetEpoch(5);
          for (int64_t i : s.Indices()) {
            ASSERT_GE(i, 0);
            ASSERT_LT(i, n);
            ++count[i];
          }
        }
        SCOPED_TRACE(testing::Message() << "N=" << n << " R=" << r << " drop_last=" << drop_last);
        if (!drop_last) {
          EXPECT_EQ(static_cast<int64_t>(count.size()), n);  // the union is the whole dataset
        } else {
          EXPECT_EQ(static_cast<int64_t>(count.size()), (n / r) * r);  // only the dropped tail is missing
        }
        if (drop_last || n % r == 0) {
          for (const auto& [index, c] : count) EXPECT_EQ(c, 1) << "index " << index << " read twice";
        } else {
          // Padding repeats exactly total_size - N indices once more.
          int64_t extra = 0;
          for (const auto& [index, c] : count) extra += c - 1;
          EXPECT_EQ(extra, Make(n, r, 0, true, false).total_size() - n);
        }
      }
    }
  }
}

TEST(DistributedSampler, RealSamplesCountEveryExampleExactlyOnceAcrossRanks) {
  for (int64_t n : {0, 1, 3, 10, 11, 97, 1000}) {
    for (int64_t r : {1, 2, 3, 4, 16}) {
      for (bool drop_last : {false, true}) {
        std::vector<int> seen(n, 0);
        for (int64_t rank = 0; rank < r; ++rank) {
          DistributedSampler s = Make(n, r, rank, /*shuffle=*/true, drop_last);
          s.SetEpoch(2);
          const std::vector<int64_t> indices = s.Indices();
          ASSERT_LE(s.num_real_samples(), s.num_samples());
          for (int64_t i = 0; i < s.num_real_samples(); ++i) ++seen[indices[i]];
        }
        SCOPED_TRACE(testing::Message() << "N=" << n << " R=" << r << " drop_last=" << drop_last);
        int64_t total = 0;
        for (int c : seen) {
          EXPECT_LE(c, 1);
          total += c;
        }
        EXPECT_EQ(total, drop_last ? (n / r) * r : n);
      }
    }
  }
}

TEST(DistributedSampler, SameSeedAndEpochGiveTheSameOrderOnEveryConstruction) {
  DistributedSampler a = Make(1234, 3, 1, true, false, /*seed=*/42);
  DistributedSampler b = Make(1234, 3, 1, true, false, /*seed=*/42);
  a.SetEpoch(9);
  b.SetEpoch(9);
  EXPECT_EQ(a.Indices(), b.Indices());
  EXPECT_EQ(a.Indices(), a.Indices());
}

TEST(DistributedSampler, DifferentEpochsAndSeedsGiveDifferentOrders) {
  DistributedSampler s = Make(1000, 2, 0, true, false, /*seed=*/1);
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    s.SetEpoch(epoch);
    orders.insert(s.Indices());
  }
  EXPECT_EQ(orders.size(), 5u);
  s.SetEpoch(0);
  EXPECT_NE(s.Indices(), Make(1000, 2, 0, true, false, /*seed=*/2).Indices());
}

TEST(DistributedSampler, WithoutShuffleTheOrderIsSequentialAndIgnoresTheEpoch) {
  DistributedSampler s = Make(10, 3, 1, /*shuffle=*/false, /*drop_last=*/false);
  EXPECT_EQ(s.Indices(), (std::vector<int64_t>{1, 4, 7, 0}));  // padded with index 0 at position 10
  s.SetEpoch(4);
  EXPECT_EQ(s.Indices(), (std::vector<int64_t>{1, 4, 7, 0}));
}

// pad = false: every rank reads only real examples. Together the shards are the dataset, each example once;
// shard sizes differ by at most one (the first N % R ranks hold one more); each shard is the padded
// shard with its padding taken off, so turning padding off changes nothing but the repeats.
TEST(DistributedSampler, WithoutPaddingEachRankReadsOnlyItsRealExamplesAndCountsDifferByAtMostOne) {
  for (int64_t n : {0, 1, 2, 5, 7, 10, 13, 97, 1001}) {
    for (int64_t r : {1, 2, 3, 4, 8, 16}) {
      SCOPED_TRACE(testing::Message() << "N=" << n << " R=" << r);
      std::vector<int> seen(n, 0);
      int64_t most = 0, fewest = n + 1;
      for (int64_t rank = 0; rank < r; ++rank) {
        absl::StatusOr<DistributedSampler> unpadded = DistributedSampler::Create(
            n, {.num_replicas = r, .rank = rank, .shuffle = true, .seed = 7, .drop_last = false, .pad = false});
        ASSERT_TRUE(unpadded.ok()) << unpadded.status();
        unpadded->SetEpoch(3);
        DistributedSampler padded = Make(n, r, rank, /*shuffle=*/true, /*drop_last=*/false, /*seed=*/7);
        padded.SetEpoch(3);
        const std::vector<int64_t> mine = unpadded->Indices();
        const std::vector<int64_t> with_padding = padded.Indices();
        EXPECT_EQ(static_cast<int64_t>(mine.size()), unpadded->num_samples());
        EXPECT_EQ(unpadded->num_real_samples(), unpadded->num_samples());
        EXPECT_EQ(unpadded->num_samples(), padded.num_real_samples());
        EXPECT_EQ(unpadded->total_size(), n);
        // The padded shard is this one followed by its padding.
        ASSERT_LE(mine.size(), with_padding.size());
        EXPECT_TRUE(std::equal(mine.begin(), mine.end(), with_padding.begin()));
        // Rank r holds positions r, r + R, ... below N: ceil((N - r) / R) of them.
        EXPECT_EQ(unpadded->num_samples(), n > rank ? (n - rank + r - 1) / r : 0);
        for (int64_t i : mine) {
          ASSERT_GE(i, 0);
          ASSERT_LT(i, n);
          ++seen[i];
        }
        most = std::max<int64_t>(most, mine.size());
        fewest = std::min<int64_t>(fewest, mine.size());
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "index " << i;
      EXPECT_LE(most - fewest, 1);
    }
  }
}

TEST(DistributedSampler, WithoutPaddingTenExamplesOverThreeRanksGiveFourThreeAndThree) {
  std::vector<std::vector<int64_t>> shards;
  for (int64_t rank = 0; rank < 3; ++rank) {
    absl::StatusOr<DistributedSampler> s =
        DistributedSampler::Create(10, {.num_replicas = 3, .rank = rank, .shuffle = false, .pad = false});
    ASSERT_TRUE(s.ok()) << s.status();
    shards.push_back(s->Indices());
  }
  EXPECT_EQ(shards[0], (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(shards[1], (std::vector<int64_t>{1, 4, 7}));  // padded, it would end with a repeated 0
  EXPECT_EQ(shards[2], (std::vector<int64_t>{2, 5, 8}));  // padded, it would end with a repeated 1
}

TEST(DistributedSampler, PaddingIsTheDefaultAndDropLastIgnoresIt) {
  EXPECT_TRUE(DistributedSamplerOptions{}.pad);
  for (int64_t rank = 0; rank < 3; ++rank) {
    // drop_last already makes the shards equal: pad = false changes nothing.
    absl::StatusOr<DistributedSampler> cut = DistributedSampler::Create(
        11, {.num_replicas = 3, .rank = rank, .shuffle = true, .seed = 1, .drop_last = true, .pad = false});
    ASSERT_TRUE(cut.ok()) << cut.status();
    DistributedSampler reference = Make(11, 3, rank, /*shuffle=*/true, /*drop_last=*/true, /*seed=*/1);
    EXPECT_EQ(cut->Indices(), reference.Indices());
    EXPECT_EQ(cut->num_samples(), 3);
    EXPECT_EQ(cut->total_size(), 9);
  }
}

TEST(RandomPermutation, IsAPermutationAndLooksUniform) {
  const std::vector<int64_t> p = RandomPermutation(50001, 3);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50001; ++i) ASSERT_EQ(sorted[i], i);
  int64_t fixed_points = 0;
  for (int64_t i = 0; i < 50001; ++i) fixed_points += p[i] == i;
  EXPECT_LT(fixed_points, 10);  // about 1 expected for a uniform permutation
  // Position of element 0 over many seeds is spread over all of a small range.
  std::vector<int> where(7, 0);
  for (uint64_t seed = 0; seed < 7000; ++seed) {
    const std::vector<int64_t> q = RandomPermutation(7, seed);
    ++where[std::find(q.begin(), q.end(), 0) - q.begin()];
  }
  for (int c : where) EXPECT_NEAR(c, 1000, 150);
}

TEST(DistributedSampler, RejectsBadRanksAndReplicaCounts) {
  EXPECT_FALSE(DistributedSampler::Create(10, {.num_replicas = 2, .rank = 2}).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, {.num_replicas = 2, .rank = -1}).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, {.num_replicas = 0, .rank = 0}).ok());
  EXPECT_FALSE(DistributedSampler::Create(-1, {}).ok());
  EXPECT_TRUE(DistributedSampler::Create(0, {}).ok());
}

}  // namespace
}  // namespace tinyddp::data
