// The quorum over a real store (HashStore shared by threads, as a TCPStore is by processes).
#include "dist/elastic/in_place/quorum.h"

#include <chrono>
#include <thread>
#include <vector>

#include "dist/store/hash_store.h"
#include "gtest/gtest.h"

namespace tinyddp::dist::in_place {
namespace {

using std::chrono::milliseconds;

TEST(Quorum, SurvivorsAgreeOnTheSameMembersWithoutTheMissingReplica) {
  HashStore store;
  const std::vector<int> previous = {0, 1, 2, 3};
  std::vector<absl::StatusOr<Membership>> out(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int id : {0, 1, 3}) {  // replica 2 is dead: it never arrives
    threads.emplace_back([&, id] { out[id] = AgreeOnMembership(store, 1, previous, id, 7, milliseconds(300)); });
  }
  for (auto& t : threads) t.join();
  for (int id : {0, 1, 3}) {
    ASSERT_TRUE(out[id].ok()) << out[id].status();
    EXPECT_EQ(out[id]->members, (std::vector<int>{0, 1, 3}));
    EXPECT_EQ(out[id]->step, 7);
    EXPECT_EQ(out[id]->IndexOf(3), 2);
  }
}

TEST(Quorum, TheLargestNextStepWinsAndItsLowestReplicaIsTheSource) {
  HashStore store;
  const std::vector<int> previous = {0, 1, 2};
  const int64_t next[] = {5, 6, 6};  // 1 and 2 completed step 5's all_reduce before the failure
  std::vector<absl::StatusOr<Membership>> out(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int id = 0; id < 3; ++id) {
    threads.emplace_back([&, id] { out[id] = AgreeOnMembership(store, 4, previous, id, next[id], milliseconds(2000)); });
  }
  for (auto& t : threads) t.join();
  for (int id = 0; id < 3; ++id) {
    ASSERT_TRUE(out[id].ok()) << out[id].status();
    EXPECT_EQ(out[id]->step, 6);
    EXPECT_EQ(out[id]->source, 1);
    EXPECT_EQ(out[id]->members.size(), 3u);
  }
}

TEST(Quorum, ALateSurvivorReadsTheDecisionAndIsExcluded) {
  HashStore store;
  const std::vector<int> previous = {0, 1};
  absl::StatusOr<Membership> early = AgreeOnMembership(store, 2, previous, 0, 3, milliseconds(50));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->members, (std::vector<int>{0}));
  absl::StatusOr<Membership> late = AgreeOnMembership(store, 2, previous, 1, 3, milliseconds(50));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.status().message().find("excluded"), absl::string_view::npos) << late.status();
}

}  // namespace
}  // namespace tinyddp::dist::in_place
