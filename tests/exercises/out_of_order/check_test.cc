// Checks exercise 3 (out_of_order.h) on real processes over Gloo. Solved, the ranks launch their
// buckets in different orders, and then:
//   - with the debug check on (TINYDDP_DISTRIBUTED_DEBUG=DETAIL; here enabled on the group directly),
//     every rank stops at the first mismatched collective with an error naming both calls;
//   - without it, buckets of equal sizes are averaged with the wrong partners, and nothing says so.
//   ./bazelw test //tests/exercises/out_of_order:check             # your solution
//   ./bazelw test //tests/exercises/out_of_order:reference_check   # the reference (what CI runs)
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "dist/process_group/debug_check.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/prefix_store.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tests/exercises/out_of_order/out_of_order.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

// Bucket k of `rank`: `size` values that tell rank and bucket apart.
Tensor Bucket(int rank, int k, int64_t size) {
  std::vector<float> v(size);
  for (int64_t i = 0; i < size; ++i) v[i] = 100.f * rank + 10.f * k + 0.5f * i;
  return Tensor::FromVector(v, {size});
}

std::unique_ptr<dist::ProcessGroupGloo> Group(const RankContext& ctx, bool debug_check) {
  auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (debug_check) {
    (*pg)->EnableDebugCheck(std::make_unique<dist::CollectiveFingerprintCheck>(
        std::make_shared<dist::PrefixStore>("debug", ctx.store), ctx.rank, ctx.world_size, std::chrono::seconds(60)));
  }
  return std::move(*pg);
}

TEST(OutOfOrder, TheDebugCheckStopsEveryRankNamingBothCalls) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = Group(ctx, /*debug_check=*/true);
    std::vector<Tensor> buckets = {Bucket(ctx.rank, 0, 5), Bucket(ctx.rank, 1, 7), Bucket(ctx.rank, 2, 11)};
    const absl::Status s = AllReduceBuckets(*pg, buckets);
    ASSERT_FALSE(s.ok()) << "no error on rank " << ctx.rank << ": every rank launched the buckets in the same "
                         << "order, so every collective matched. Make the order depend on the rank.";
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "collective mismatch")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "AllReduce(float32 [")) << s;
  });
}

TEST(OutOfOrder, WithoutTheCheckEqualBucketsAreAveragedWithTheWrongPartnersSilently) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Group(ctx, /*debug_check=*/false);
    const int64_t size = 6;
    std::vector<Tensor> buckets = {Bucket(ctx.rank, 0, size), Bucket(ctx.rank, 1, size), Bucket(ctx.rank, 2, size)};
    const absl::Status s = AllReduceBuckets(*pg, buckets);
    ASSERT_TRUE(s.ok()) << s;  // nothing fails: same sizes, same count
    int wrong = 0;
    for (int k = 0; k < 3; ++k) {
      const std::vector<float> got = buckets[k].ToVector<float>();
      for (int64_t i = 0; i < size; ++i) {
        const float right = (Bucket(0, k, size).ToVector<float>()[i] + Bucket(1, k, size).ToVector<float>()[i]) / 2;
        wrong += got[i] != right;
      }
    }
    // Gather the counts so that every rank reaches the same verdict.
    Tensor count = Tensor::FromVector<int64_t>({wrong}, {1});
    ASSERT_TRUE(pg->AllReduce(count, dist::ReduceOp::kSum)->Wait().ok());
    EXPECT_GT(count.ToVector<int64_t>()[0], 0) << "every bucket came out right: the ranks launched the buckets "
                                                  "in the same order. Make the order depend on the rank.";
  });
}

}  // namespace
}  // namespace tinyddp::exercises
