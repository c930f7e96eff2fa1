// ZeRO-1's shard layout (shard_layout.h): block sizes, padding bounds and the pieces of each parameter.
#include "dist/parallel/zero/shard_layout.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tinyddp::dist::zero {
namespace {

constexpr BlockSize kGloo = BlockSize::kGlooChunks;

TEST(ShardNumel, SmallBucketsAreTwoSegmentsOfCeilNumelOverTwoWorldPerRank) {
  // Up to 2 * world MiB, Gloo's ring cuts 2 * world segments: a block is 2 * ceil(numel / (2 * world)).
  EXPECT_EQ(ShardNumel(10, 3, 4, kGloo), 4);    // ceil(10/6) = 2 -> 4; blocks [0,4) [4,8) [8,12): 2 padding
  EXPECT_EQ(ShardNumel(7, 3, 4, kGloo), 4);     // ceil(7/6) = 2 -> 4, more than ceil(7/3) = 3
  EXPECT_EQ(ShardNumel(12, 3, 4, kGloo), 4);
  EXPECT_EQ(ShardNumel(1, 4, 4, kGloo), 2);     // one element: rank 0 owns it, ranks 1..3 own padding only
  EXPECT_EQ(ShardNumel(1000, 2, 4, kGloo), 500);
  EXPECT_EQ(ShardNumel(1001, 2, 4, kGloo), 502);
  EXPECT_EQ(ShardNumel(5, 1, 4, kGloo), 5);     // one rank: the whole bucket, no padding (no sum to order)
  EXPECT_EQ(ShardNumel(5, 1, 4, BlockSize::kAligned), 5);
}

TEST(ShardNumel, LargeBucketsAreWholeSegmentsOfAtMostOneMiB) {
  // 10.5 MiB of float32 on 2 ranks: 11 segments of <= 1 MiB, rounded up to 12 (a multiple of the ranks);
  // each rank's chunk is 6 segments of ceil(numel / 12) elements.
  const int64_t numel = (int64_t{21} << 20) / 2 / 4;  // 10.5 MiB / 4 bytes
  EXPECT_EQ(ShardNumel(numel, 2, 4, kGloo), 6 * ((numel + 11) / 12));
}

TEST(ShardNumel, AlignedBlocksAreAnEvenShareRoundedUpToSixteenElements) {
  EXPECT_EQ(ShardNumel(1, 2, 4, BlockSize::kAligned), 16);
  EXPECT_EQ(ShardNumel(33, 2, 4, BlockSize::kAligned), 32);  // ceil(33/2) = 17 -> 32
  EXPECT_EQ(ShardNumel(16781312, 2, 4, BlockSize::kAligned), 8390656);  // 4096x4096 + 4096: already a multiple
  EXPECT_EQ(BlockSizeFor("gloo"), BlockSize::kGlooChunks);
  EXPECT_EQ(BlockSizeFor("nccl"), BlockSize::kAligned);
}

TEST(ShardNumel, IsAtLeastAnEvenShareAndPadsByLessThanTheSegmentsPerRank) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    for (int64_t numel : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{13}, int64_t{1000}, int64_t{262145},
                          int64_t{3} << 20, (int64_t{5} << 20) + 3}) {
      const int64_t shard = ShardNumel(numel, world, 4, kGloo);
      const int64_t even = (numel + world - 1) / world;
      const int64_t segments_per_rank = std::max<int64_t>(2, (numel * 4 + (world << 20) - 1) / (world << 20) + 1);
      EXPECT_GE(shard, even) << numel << " on " << world;
      EXPECT_LT(shard - even, segments_per_rank) << numel << " on " << world;
      EXPECT_EQ(PaddedNumel(numel, world, 4, kGloo), world * shard);
      const int64_t aligned = ShardNumel(numel, world, 4, BlockSize::kAligned);
      EXPECT_GE(aligned, even);
      EXPECT_LT(aligned - even, 16);
      if (world > 1) EXPECT_EQ(aligned % 16, 0) << "every rank's block starts 64-byte aligned";
    }
  }
}

TEST(PiecesInShard, CutsStraddlingParametersAndSkipsPadding) {
  // Three parameters of 5, 2 and 4 elements: 11 elements in blocks of 4 on 3 ranks (1 padding).
  const std::vector<ParamSpan> params = {{7, 0, 5}, {3, 5, 2}, {9, 7, 4}};
  const std::vector<ShardPiece> r0 = PiecesInShard(params, 4, 0);
  ASSERT_EQ(r0.size(), 1u);
  EXPECT_EQ(r0[0].index, 7u);
  EXPECT_EQ(r0[0].param_begin, 0);
  EXPECT_EQ(r0[0].shard_begin, 0);
  EXPECT_EQ(r0[0].numel, 4);

  const std::vector<ShardPiece> r1 = PiecesInShard(params, 4, 1);  // elements [4, 8)
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r1[0].index, 7u);  // the last element of the first parameter
  EXPECT_EQ(r1[0].param_begin, 4);
  EXPECT_EQ(r1[0].shard_begin, 0);
  EXPECT_EQ(r1[0].numel, 1);
  EXPECT_EQ(r1[1].index, 3u);  // all of the second
  EXPECT_EQ(r1[1].param_begin, 0);
  EXPECT_EQ(r1[1].shard_begin, 1);
  EXPECT_EQ(r1[1].numel, 2);
  EXPECT_EQ(r1[2].index, 9u);  // the first element of the third
  EXPECT_EQ(r1[2].param_begin, 0);
  EXPECT_EQ(r1[2].shard_begin, 3);
  EXPECT_EQ(r1[2].numel, 1);

  const std::vector<ShardPiece> r2 = PiecesInShard(params, 4, 2);  // elements [8, 12): 3 real, 1 padding
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].index, 9u);
  EXPECT_EQ(r2[0].param_begin, 1);
  EXPECT_EQ(r2[0].numel, 3);

  EXPECT_TRUE(PiecesInShard(params, 4, 3).empty());  // past the end: padding only
}

TEST(PiecesInShard, EveryElementBelongsToExactlyOneRank) {
  const std::vector<ParamSpan> params = {{0, 0, 13}, {1, 13, 1}, {2, 14, 17 * 13}, {3, 14 + 17 * 13, 17}};
  const int64_t numel = 14 + 18 * 13 + 4;
  for (int world : {1, 2, 3, 4}) {
    const int64_t shard = ShardNumel(numel, world, 4, kGloo);
    std::vector<int> owners(numel, 0);
    for (int r = 0; r < world; ++r) {
      for (const ShardPiece& p : PiecesInShard(params, shard, r)) {
        for (int64_t e = 0; e < p.numel; ++e) ++owners[params[p.index].offset + p.param_begin + e];
      }
    }
    for (int64_t e = 0; e < numel; ++e) EXPECT_EQ(owners[e], 1) << "element " << e << " on " << world << " ranks";
  }
}

}  // namespace
}  // namespace tinyddp::dist::zero
