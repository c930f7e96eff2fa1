// Checks exercise 3 (out_of_order.h) on real processes over Gloo. Solved, the ranks launch their
// buckets in different orders, and then:
//   - with the debug check on (TINYDDP_DISTRIBUTED_DEBUG=DETAIL; here enabled on the group directly),
//     every rank stops at the first mismatched collective with an error naming both calls;
//   - without it, buckets of equal sizes are averaged with the wrong partners, and nothing says so.
// An observer on the group (collective_log.h) sees what each rank issued: one AllReduce(AVG) per bucket,
// every bucket once, in an order that differs between the ranks. So a mismatch made some other way (one
// rank summing while the other averages, a Broadcast for an AllReduce) fails the check, though the debug
// mode would catch that too.
//   ./bazelw test //tests/exercises/out_of_order:check             # your solution
//   ./bazelw test //tests/exercises/out_of_order:reference_check   # the reference (what CI runs)
//   ./bazelw test //tests/exercises/out_of_order:rejects_wrong_solution   # wrong/ must fail it
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "dist/observe/debug_check/debug_check.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/prefix_store.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tests/exercises/collective_log.h"
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
    (*pg)->AddObserver(std::make_shared<dist::CollectiveFingerprintCheck>(
        std::make_shared<dist::PrefixStore>("debug", ctx.store), ctx.rank, ctx.world_size, std::chrono::seconds(60)));
  }
  return std::move(*pg);
}

// What this rank issued must be the exercise's calls: one AllReduce(AVG) per bucket, each bucket once
// (`sizes`: the buckets' lengths, told apart by them when they differ). Returns the lengths in the order
// this rank launched them.
std::vector<int64_t> ExpectOneAverageOfEachBucket(const RankContext& ctx, const std::vector<dist::CollectiveInfo>& used,
                                                  std::vector<int64_t> sizes) {
  std::vector<int64_t> order;
  for (const dist::CollectiveInfo& c : used) {
    EXPECT_TRUE(c.op == "AllReduce" && absl::EndsWith(c.signature, ", AVG"))
        << "rank " << ctx.rank << " issued " << c.op << "(" << c.signature << "): launch every bucket with "
        << "pg.AllReduce(bucket, ReduceOp::kAvg), as DDP does, and change only the order (all it issued: "
        << CollectiveLog::Describe(used) << ")";
    order.push_back(c.numel);
  }
  std::vector<int64_t> launched = order;
  std::sort(launched.begin(), launched.end());
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(launched, sizes) << "rank " << ctx.rank << " should launch every bucket exactly once; it issued "
                             << CollectiveLog::Describe(used);
  return order;
}

TEST(OutOfOrder, TheDebugCheckStopsEveryRankNamingBothCalls) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = Group(ctx, /*debug_check=*/true);
    auto log = std::make_shared<CollectiveLog>();
    pg->AddObserver(log);
    std::vector<Tensor> buckets = {Bucket(ctx.rank, 0, 5), Bucket(ctx.rank, 1, 7), Bucket(ctx.rank, 2, 11)};
    const absl::Status s = AllReduceBuckets(*pg, buckets);
    const std::vector<int64_t> order = ExpectOneAverageOfEachBucket(ctx, log->Take(), {5, 7, 11});
    ASSERT_FALSE(s.ok()) << "no error on rank " << ctx.rank << ": every rank launched the buckets in the same "
                         << "order, so every collective matched. Make the order depend on the rank.";
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "collective mismatch")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "AllReduce(float32 [")) << s;
    // The group is broken now (every later collective fails), so the ranks compare orders through the store.
    const std::string mine = absl::StrJoin(order, ",");
    ASSERT_TRUE(ctx.store->Set("order/" + std::to_string(ctx.rank), dist::Bytes(mine.begin(), mine.end())).ok());
    absl::StatusOr<dist::Bytes> rank0 = ctx.store->Get("order/0");
    ASSERT_TRUE(rank0.ok()) << rank0.status();
    int same_as_rank0 = 0;
    for (int r = 0; r < ctx.world_size; ++r) {
      absl::StatusOr<dist::Bytes> theirs = ctx.store->Get("order/" + std::to_string(r));
      ASSERT_TRUE(theirs.ok()) << theirs.status();
      same_as_rank0 += *theirs == *rank0;
    }
    EXPECT_LT(same_as_rank0, ctx.world_size) << "every rank launched the buckets in the same order (rank "
                                             << ctx.rank << ": lengths " << mine << "); make the order depend on "
                                             << "the rank";
  });
}

TEST(OutOfOrder, WithoutTheCheckEqualBucketsAreAveragedWithTheWrongPartnersSilently) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Group(ctx, /*debug_check=*/false);
    auto log = std::make_shared<CollectiveLog>();
    pg->AddObserver(log);
    const int64_t size = 6;
    std::vector<Tensor> buckets = {Bucket(ctx.rank, 0, size), Bucket(ctx.rank, 1, size), Bucket(ctx.rank, 2, size)};
    const absl::Status s = AllReduceBuckets(*pg, buckets);
    ASSERT_TRUE(s.ok()) << s;  // nothing fails: same sizes, same count
    ExpectOneAverageOfEachBucket(ctx, log->Take(), {size, size, size});
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
