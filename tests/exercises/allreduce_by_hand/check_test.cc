// Checks exercise 1 (allreduce_by_hand.h) on real processes over Gloo: 2, 3 and 4 ranks, lengths that
// are and are not multiples of the number of ranks, random values; the sum must match every rank's
// inputs added up, bit for bit the same on every rank, and be made of one ReduceScatter of the whole
// (padded) tensor followed by one AllGather of the block it left: an observer on the group
// (collective_log.h) sees which collectives ran, so an AllReduce, a Broadcast or a gather of everything
// does not pass for the two halves of a ring.
//   ./bazelw test //tests/exercises/allreduce_by_hand:check             # your solution
//   ./bazelw test //tests/exercises/allreduce_by_hand:reference_check   # the reference (what CI runs)
//   ./bazelw test //tests/exercises/allreduce_by_hand:rejects_wrong_solution   # wrong/ must fail it
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tests/exercises/allreduce_by_hand/allreduce_by_hand.h"
#include "tests/exercises/collective_log.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

// Rank r's input of length n: the same numbers wherever it is computed.
std::vector<float> InputOf(int rank, int64_t n) {
  std::mt19937 rng(1000 * rank + static_cast<uint32_t>(n));
  std::uniform_real_distribution<float> value(-3.f, 3.f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

void CheckOnRanks(int world) {
  RunOnRanks(world, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    auto log = std::make_shared<CollectiveLog>();
    (*pg)->AddObserver(log);
    for (int64_t n : {1, 2, 7, 1000, 4099}) {
      Tensor t = Tensor::FromVector(InputOf(ctx.rank, n), {n});
      log->Take();
      const absl::Status s = AllReduceByHand(**pg, t);
      ASSERT_TRUE(s.ok()) << s;
      const std::vector<dist::CollectiveInfo> used = log->Take();
      ASSERT_EQ(CollectiveLog::Ops(used), (std::vector<std::string>{"ReduceScatter", "AllGather"}))
          << "length " << n << ": the solution issued " << CollectiveLog::Describe(used) << ". Use exactly two "
          << "collectives, one ReduceScatter and then one AllGather, and nothing else (no AllReduce, no Broadcast)";
      // The reduce-scatter takes the whole tensor, padded by less than one element per rank; the all-gather
      // takes the one block of the sum it left on this rank (1/size of that), not the whole tensor again.
      const int64_t scattered = used[0].numel, gathered = used[1].numel;
      EXPECT_TRUE(scattered >= n && scattered < n + ctx.world_size && scattered % ctx.world_size == 0)
          << "length " << n << ": the ReduceScatter's input holds " << scattered << " elements; it should be the "
          << "whole tensor padded to a multiple of " << ctx.world_size << " ranks";
      EXPECT_EQ(gathered * ctx.world_size, scattered)
          << "length " << n << ": each rank should all-gather the block the ReduceScatter left it ("
          << scattered / ctx.world_size << " elements), not " << gathered;
      const std::vector<float> got = t.ToVector<float>();
      ASSERT_EQ(got.size(), static_cast<size_t>(n)) << "the tensor must keep its length";
      std::vector<std::vector<float>> inputs;  // every rank's, computed once (not once per element)
      for (int r = 0; r < ctx.world_size; ++r) inputs.push_back(InputOf(r, n));
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = 0; r < ctx.world_size; ++r) want += inputs[r][i];
        ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::fabs(want)))
            << "element " << i << " of " << n << " on rank " << ctx.rank << ", " << ctx.world_size << " ranks";
      }
      // Every rank holds the very same bits: gather everyone's result and compare.
      Tensor all = Tensor::Empty({n * ctx.world_size});
      ASSERT_TRUE((*pg)->AllGather(all, t)->Wait().ok());
      const std::vector<float> every = all.ToVector<float>();
      for (int r = 0; r < ctx.world_size; ++r) {
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(every[r * n + i], got[i]) << "rank " << r << " differs";
      }
    }
  });
}

TEST(AllReduceByHand, SumsOverTwoRanks) { CheckOnRanks(2); }
TEST(AllReduceByHand, SumsOverThreeRanksWhateverTheLength) { CheckOnRanks(3); }
TEST(AllReduceByHand, SumsOverFourRanksWhateverTheLength) { CheckOnRanks(4); }

}  // namespace
}  // namespace tinyddp::exercises
