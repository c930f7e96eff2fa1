// Subgroups on real processes over Gloo: NewGroup gives members a group of their own and others null;
// groups of different sizes run interleaved, each rank issuing them in its own order, and stay correct;
// the ranks must agree on the group; DeviceMesh's rows and columns reduce over exactly their ranks.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/parallel/subgroups/device_mesh.h"
#include "dist/parallel/subgroups/new_group.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

// A value no two ranks share, and whose sums over any set of ranks differ: 1, 2, 4, 8, ... times 1.5.
float ValueOf(int world_rank) { return 1.5f * static_cast<float>(1 << world_rank); }

Tensor Filled(int64_t n, float value) { return Tensor::Full({n}, value); }

float SumOver(const std::vector<int>& ranks) {
  float sum = 0;
  for (int r : ranks) sum += ValueOf(r);
  return sum;
}

void ExpectAll(const Tensor& t, float value, const std::string& what) {
  for (float v : t.ToVector<float>()) {
    ASSERT_EQ(v, value) << what;
  }
}

TEST(NewGroup, MembersGetAGroupOfTheirOwnRankedBySortedPositionAndOthersGetNull) {
  RunOnRanks(4, [](const RankContext& ctx) {
    auto world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    auto group = NewGroup(*world, ctx.store, {3, 1, 2});
    ASSERT_TRUE(group.ok()) << group.status();
    if (ctx.rank == 0) {
      EXPECT_EQ(*group, nullptr);
    } else {
      ASSERT_NE(*group, nullptr);
      EXPECT_EQ((*group)->size(), 3);
      EXPECT_EQ((*group)->rank(), ctx.rank - 1);  // {1, 2, 3}: world rank 1 is group rank 0
      EXPECT_STREQ((*group)->backend_name(), "gloo");
      EXPECT_EQ((*group)->timeout(), world->timeout());
      const int64_t world_seq = world->sequence_number();
      Tensor t = Filled(1001, ValueOf(ctx.rank));
      ASSERT_TRUE((*group)->AllReduce(t)->Wait().ok());
      ExpectAll(t, SumOver({1, 2, 3}), "all_reduce over {1, 2, 3}");
      EXPECT_EQ((*group)->sequence_number(), 1);       // its own numbering
      EXPECT_EQ(world->sequence_number(), world_seq);  // the world's untouched
    }
    // The world still works, and a later group gets the next number on every rank.
    Tensor t = Filled(7, ValueOf(ctx.rank));
    ASSERT_TRUE(world->AllReduce(t)->Wait().ok());
    ExpectAll(t, SumOver({0, 1, 2, 3}), "world all_reduce after NewGroup");
    auto pair = NewGroup(*world, ctx.store, {0, 3});
    ASSERT_TRUE(pair.ok()) << pair.status();
    EXPECT_EQ(*pair != nullptr, ctx.rank == 0 || ctx.rank == 3);
  });
}

TEST(NewGroup, GroupsOfDifferentSizesRunInterleavedInAnyOrderAcrossGroupsAndStayCorrect) {
  RunOnRanks(4, [](const RankContext& ctx) {
    auto world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    // Every rank creates every group (collective), in the same order.
    const std::vector<std::vector<int>> lists = {{0, 1, 2}, {1, 3}, {0, 1, 2, 3}, {2}};
    std::vector<std::shared_ptr<ProcessGroup>> groups;
    for (const auto& ranks : lists) {
      auto g = NewGroup(*world, ctx.store, ranks);
      ASSERT_TRUE(g.ok()) << g.status();
      groups.push_back(*g);
    }
    // Each rank issues its groups' collectives in an order of its own (rotated by its rank): only the order
    // within a group must agree across ranks. All are in flight together, then waited for.
    struct Pending {
      std::shared_ptr<Work> work;
      Tensor out;
      float expected;
      std::string what;
    };
    std::vector<Pending> pending;
    for (int k = 0; k < 3; ++k) {  // three rounds, so that each group's sequence numbers advance together
      for (size_t i = 0; i < lists.size(); ++i) {
        const size_t which = (i + ctx.rank) % lists.size();
        ProcessGroup* g = groups[which].get();
        if (g == nullptr) continue;
        const int64_t n = 97 + 1000 * static_cast<int64_t>(which) + k;  // a different size per group and round
        if (which == 1) {  // {1, 3}: an all_gather of the two members' values
          Tensor in = Filled(n, ValueOf(ctx.rank) + k), out = Tensor::Empty({2 * n});
          pending.push_back({g->AllGather(out, in), out.Rows(g->rank() == 0 ? n : 0, g->rank() == 0 ? 2 * n : n),
                             ValueOf(g->rank() == 0 ? 3 : 1) + k, "all_gather over {1, 3}"});
        } else {
          Tensor t = Filled(n, ValueOf(ctx.rank) + k);
          std::vector<int> members = lists[which];
          pending.push_back({g->AllReduce(t), t, SumOver(members) + k * static_cast<float>(members.size()),
                             absl::StrCat("all_reduce over group ", which, " round ", k)});
        }
      }
    }
    for (Pending& p : pending) {
      ASSERT_TRUE(p.work->Wait().ok()) << p.what;
      ExpectAll(p.out, p.expected, p.what);
    }
  });
}

TEST(NewGroup, RanksThatAskForDifferentGroupsAllGetInvalidArgumentAndNobodyHangs) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    auto group = NewGroup(*world, ctx.store, ctx.rank == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1});
    ASSERT_FALSE(group.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(group.status())) << group.status();
    EXPECT_NE(group.status().message().find("rank 2 asked for another list of ranks"), std::string::npos)
        << group.status();
    auto bad = NewGroup(*world, ctx.store, {0, 5});  // the same bad list everywhere: refused everywhere
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
    auto none = NewGroup(*world, {0, 1});  // a Gloo world keeps no store
    EXPECT_TRUE(absl::IsFailedPrecondition(none.status())) << none.status();
  });
}

TEST(NewGroup, AFlightRecorderOfItsOwnWritesUnderTheGroupsName) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/subgroup_flight_records");
  RunOnRanks(3, [dir](const RankContext& ctx) {
    ::setenv("TINYDDP_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    ::mkdir(dir.c_str(), 0755);
    auto world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    NewGroupOptions options;
    options.flight_recorder = true;
    auto group = NewGroup(*world, ctx.store, {1, 2}, options);
    ASSERT_TRUE(group.ok()) << group.status();
    if (*group == nullptr) return;
    Tensor t = Filled(5, 1.f);
    ASSERT_TRUE((*group)->AllReduce(t)->Wait().ok());
    const std::string ring = absl::StrCat(dir, "/subgroup0.rank", (*group)->rank(), ".ring");
    EXPECT_EQ(::access(ring.c_str(), F_OK), 0) << ring << " missing";
  });
}

TEST(DeviceMesh, RowsAndColumnsReduceOverExactlyTheirRanks) {
  for (const auto& [dp, tp] : {std::pair<int, int>{2, 2}, {1, 3}, {3, 1}}) {
    RunOnRanks(dp * tp, [dp = dp, tp = tp](const RankContext& ctx) {
      auto world = ddp_testing::MakeGlooGroup(ctx);
      ASSERT_NE(world, nullptr);
      auto mesh = DeviceMesh::Create(*world, ctx.store, dp, tp);
      ASSERT_TRUE(mesh.ok()) << mesh.status();
      EXPECT_EQ(mesh->RankAt(mesh->dp_index, mesh->tp_index), ctx.rank);
      ASSERT_NE(mesh->tp_group, nullptr);
      ASSERT_NE(mesh->dp_group, nullptr);
      EXPECT_EQ(mesh->tp_group->size(), tp);
      EXPECT_EQ(mesh->tp_group->rank(), mesh->tp_index);
      EXPECT_EQ(mesh->dp_group->size(), dp);
      EXPECT_EQ(mesh->dp_group->rank(), mesh->dp_index);
      std::vector<int> row, column;
      for (int j = 0; j < tp; ++j) row.push_back(mesh->RankAt(mesh->dp_index, j));
      for (int i = 0; i < dp; ++i) column.push_back(mesh->RankAt(i, mesh->tp_index));
      Tensor r = Filled(301, ValueOf(ctx.rank)), c = Filled(302, ValueOf(ctx.rank));
      auto row_work = mesh->tp_group->AllReduce(r);  // both in flight at once
      auto column_work = mesh->dp_group->AllReduce(c);
      ASSERT_TRUE(row_work->Wait().ok());
      ASSERT_TRUE(column_work->Wait().ok());
      ExpectAll(r, SumOver(row), mesh->ToString(ctx.rank) + ": tp group");
      ExpectAll(c, SumOver(column), mesh->ToString(ctx.rank) + ": dp group");
    });
  }
  RunOnRanks(4, [](const RankContext& ctx) {
    auto world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    EXPECT_TRUE(absl::IsInvalidArgument(DeviceMesh::Create(*world, ctx.store, 3, 2).status()));
    auto mesh = DeviceMesh::Create(*world, ctx.store, 2, 2);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    if (ctx.rank == 3) EXPECT_EQ(mesh->ToString(3), "mesh 2 x 2 (dp x tp): rank 3 at (1, 1), tp group {2, 3}, dp group {1, 3}");
  });
}

}  // namespace
}  // namespace tinyddp::dist
