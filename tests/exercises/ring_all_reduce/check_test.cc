// Checks exercise 7 (ring_all_reduce.h) on real processes over Gloo: 3 and 4 ranks, lengths that are and
// are not multiples of the number of ranks (and one shorter than it), random values. The sum must match
// every rank's inputs added up, the same bits on every rank; and an observer on the group
// (collective_log.h) sees which calls ran: point-to-point only, every send to the next rank and every
// receive from the previous one, 2(n-1) of each, one block (not the whole tensor) per send.
//   ./bazelw test //tests/exercises/ring_all_reduce:check             # your solution
//   ./bazelw test //tests/exercises/ring_all_reduce:reference_check   # the reference (what CI runs)
//   ./bazelw test //tests/exercises/ring_all_reduce:rejects_wrong_solution   # wrong/ must fail it
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tests/exercises/collective_log.h"
#include "tests/exercises/ring_all_reduce/ring_all_reduce.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

// Rank r's input of length n: the same numbers wherever it is computed.
std::vector<float> InputOf(int rank, int64_t n) {
  std::mt19937 rng(7000 * rank + static_cast<uint32_t>(n));
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
    const int n = ctx.world_size, next = (ctx.rank + 1) % n, prev = (ctx.rank - 1 + n) % n;
    for (int64_t len : {2, 7, 1000, 4099}) {
      Tensor t = Tensor::FromVector(InputOf(ctx.rank, len), {len});
      log->Take();
      const absl::Status s = RingAllReduce(**pg, t);
      ASSERT_TRUE(s.ok()) << s;
      // Which calls ran: point-to-point only, along the ring, 2(n-1) sends and receives of one block each.
      const std::vector<dist::CollectiveInfo> used = log->Take();
      const int64_t block = (len + n - 1) / n;  // the largest block a ring of n ranks sends
      int sends = 0, recvs = 0;
      for (const dist::CollectiveInfo& call : used) {
        ASSERT_TRUE(dist::IsPointToPoint(call.seq))
            << "length " << len << ": the solution issued " << call.op << "(" << call.signature << "), a collective; "
            << "the ring is made of Send, Recv and BatchSendRecv only";
        for (const CollectiveLog::Transfer& x : CollectiveLog::Transfers(call)) {
          ASSERT_EQ(x.peer, x.send ? next : prev)
              << "length " << len << ": rank " << ctx.rank << " " << (x.send ? "sent to" : "received from")
              << " rank " << x.peer << " in " << call.op << "(" << call.signature << "); on the ring it only "
              << "sends to the next rank (" << next << ") and receives from the previous one (" << prev << ")";
          ASSERT_LE(x.numel, block)
              << "length " << len << ": " << (x.send ? "sent " : "received ") << x.numel
              << " elements in one step; a ring step sends one block, at most " << block << " of the " << len
              << " elements for " << n << " ranks";
          (x.send ? sends : recvs) += 1;
        }
      }
      ASSERT_TRUE(sends == 2 * (n - 1) && recvs == 2 * (n - 1))
          << "length " << len << ": " << sends << " sends and " << recvs << " receives; the ring on " << n
          << " ranks takes 2(n-1) = " << 2 * (n - 1) << " steps (n-1 to reduce-scatter, n-1 to all-gather), "
          << "one send and one receive each. The calls: " << CollectiveLog::Describe(used);
      // The sum, on every rank.
      const std::vector<float> got = t.ToVector<float>();
      ASSERT_EQ(got.size(), static_cast<size_t>(len)) << "the tensor must keep its length";
      std::vector<std::vector<float>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(InputOf(r, len));
      for (int64_t i = 0; i < len; ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += inputs[r][i];
        ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::fabs(want)))
            << "element " << i << " of " << len << " on rank " << ctx.rank << ", " << n << " ranks";
      }
      // Each block was summed once, on one rank, and then copied: every rank holds the very same bits.
      Tensor all = Tensor::Empty({len * n});
      ASSERT_TRUE((*pg)->AllGather(all, t)->Wait().ok());
      log->Take();
      const std::vector<float> every = all.ToVector<float>();
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < len; ++i) ASSERT_EQ(every[r * len + i], got[i]) << "rank " << r << " differs";
      }
    }
  });
}

TEST(RingAllReduce, SumsOverThreeRanksInFourSteps) { CheckOnRanks(3); }
TEST(RingAllReduce, SumsOverFourRanksInSixSteps) { CheckOnRanks(4); }

}  // namespace
}  // namespace tinyddp::exercises
