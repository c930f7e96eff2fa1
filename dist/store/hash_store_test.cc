// HashStore, PrefixStore and StoreBarrier in one process: the shared conformance checks, namespace
// isolation, and a barrier across threads.
#include "dist/store/hash_store.h"

#include <atomic>
#include <thread>
#include <vector>

#include "dist/store/prefix_store.h"
#include "dist/store/store_barrier.h"
#include "dist/testing/store_conformance.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(HashStore, MeetsTheStoreSemantics) {
  auto store = std::make_shared<HashStore>();
  testing::CheckSetGetDeleteNumKeys(*store);
  testing::CheckAdd(*store);
  testing::CheckCompareSet(*store);
  testing::CheckTimeoutsNameTheKeys(*store);
  testing::CheckBlockingGetWakesOnSet([&] { return store; });
  testing::CheckConcurrentAddsAreAtomic([&] { return store; }, 8);
  testing::CheckLimitsAreEnforcedWithClearErrors(*store);
  testing::CheckWaitOnManyKeysEndsWhenTheLastArrives([&] { return store; }, kMaxStoreWaitKeys);
}

TEST(PrefixStore, MeetsTheStoreSemantics) {
  auto base = std::make_shared<HashStore>();
  auto view = std::make_shared<PrefixStore>("pg0", base);
  testing::CheckSetGetDeleteNumKeys(*view);
  testing::CheckAdd(*view);
  testing::CheckCompareSet(*view);
  testing::CheckTimeoutsNameTheKeys(*view);
  testing::CheckBlockingGetWakesOnSet([&] { return view; });
  testing::CheckConcurrentAddsAreAtomic([&] { return view; }, 4);
  testing::CheckLimitsAreEnforcedWithClearErrors(*view);
  testing::CheckWaitOnManyKeysEndsWhenTheLastArrives([&] { return view; }, 1000);
}

TEST(PrefixStore, KeepsTwoNamespacesApartOnOneStore) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("groupA", base), b("groupB", base);
  ASSERT_TRUE(a.Set("rank0", std::string("from A")).ok());
  ASSERT_TRUE(b.Set("rank0", std::string("from B")).ok());
  EXPECT_EQ(*a.GetString("rank0"), "from A");
  EXPECT_EQ(*b.GetString("rank0"), "from B");
  EXPECT_EQ(*base->GetString("groupA/rank0"), "from A");
  EXPECT_EQ(*a.Add("n", 3), 3);
  EXPECT_EQ(*b.Add("n", 10), 10);
  a.set_timeout(std::chrono::milliseconds(50));
  auto missing = a.Get("only_in_b");
  ASSERT_TRUE(absl::IsDeadlineExceeded(missing.status()));
  EXPECT_NE(missing.status().message().find("groupA/only_in_b"), std::string::npos) << missing.status();
}

TEST(StoreBarrier, ReleasesAllThreadsOnlyAfterTheLastArrives) {
  auto store = std::make_shared<HashStore>();
  constexpr int kRanks = 5;
  std::atomic<int> arrived{0};
  std::atomic<int> released_early{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&] {
      ++arrived;
      absl::Status s = StoreBarrier(*store, "startup", kRanks, std::chrono::seconds(30));
      EXPECT_TRUE(s.ok()) << s;
      if (arrived.load() != kRanks) ++released_early;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(released_early.load(), 0);
}

TEST(StoreBarrier, TimesOutSayingHowManyRanksArrived) {
  HashStore store;
  absl::Status s = StoreBarrier(store, "lonely", 3, std::chrono::milliseconds(50));
  ASSERT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("only 1 of 3 ranks"), std::string::npos) << s;
}

}  // namespace
}  // namespace tinyddp::dist
