// Why the bucket layout decides the bits at 3+ ranks and not at 2 (docs/exactness.md), shown on Gloo's
// real all_reduce between real processes.
//
// Floating-point addition is commutative but not associative: a + b == b + a always, while (a + b) + c
// and (b + c) + a may differ in the last bit. A ring all_reduce over N ranks cuts the message into N
// chunks and adds each chunk around the ring starting at a different rank, so an element's sum order is
// set by the chunk its offset falls in. With 2 ranks every element is one addition, a + b: one result
// wherever it sits. With 3 or more, the same three numbers give other bits in other chunks. So moving a
// gradient inside a bucket (DDP's one-time rebuild, dist/ddp/reducer.h) changes its rounding at 3+ ranks,
// and a resumed run keeps bit for bit only if it starts from the layout the uninterrupted run has.
#include <cmath>
#include <set>
#include <vector>

#include "dist/process_group/process_group.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

// Every element of rank r's message is kTerms[r]: 1 + 1e-8 rounds to 1 in float32, so the order decides
// whether the 1e-8 survives: ((1 + 1e-8) - 1) = 0 but ((1 - 1) + 1e-8) = 1e-8.
constexpr float kTerms[] = {1.0f, 1e-8f, -1.0f, 1e-8f};
constexpr int64_t kElements = 60;  // several elements in each ring chunk at 2, 3 and 4 ranks

// The distinct values of the summed message (all elements held the same numbers on every rank).
std::set<float> DistinctSums(const RankContext& ctx) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  EXPECT_NE(pg, nullptr);
  if (pg == nullptr) return {};
  Tensor message = Tensor::Full({kElements}, kTerms[ctx.rank], DType::kFloat32);
  EXPECT_TRUE(pg->AllReduce(message, ReduceOp::kSum)->Wait().ok());
  const std::vector<float> sums = message.ToVector<float>();
  return std::set<float>(sums.begin(), sums.end());
}

TEST(RingSumOrder, TwoRanksSumEveryElementTheSameWayWhereverItSits) {
  RunOnRanks(2, [](const RankContext& ctx) {
    const std::set<float> sums = DistinctSums(ctx);
    EXPECT_EQ(sums.size(), 1u) << "a + b is b + a: two ranks have one order";
    EXPECT_EQ(*sums.begin(), 1.0f + 1e-8f);
  });
}

TEST(RingSumOrder, ThreeAndFourRanksRoundTheSameNumbersByTheirPositionInTheMessage) {
  for (int ranks : {3, 4}) {
    SCOPED_TRACE(ranks);
    RunOnRanks(ranks, [](const RankContext& ctx) {
      const std::set<float> sums = DistinctSums(ctx);
      // The exact sum is 1e-8 (3 ranks) or 2e-8 (4); each chunk's order keeps some of it or none.
      EXPECT_GT(sums.size(), 1u) << "every element was summed in one order: the ring's chunks no longer set it";
      for (float s : sums) EXPECT_LT(std::fabs(s), 3e-8f) << "a sum that is not a rounding of the exact one";
    });
  }
}

}  // namespace
}  // namespace tinyddp::dist
