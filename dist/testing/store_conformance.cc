// Store conformance checks: see store_conformance.h.
#include "dist/testing/store_conformance.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tinyddp::dist::testing {
namespace {

Bytes RandomBytes(std::mt19937& rng, size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  if (n > 1) b[n / 2] = 0;  // an embedded zero byte must survive (values are not C strings)
  return b;
}

}  // namespace

void CheckSetGetDeleteNumKeys(Store& store) {
  std::mt19937 rng(1234);
  auto before = store.NumKeys();
  ASSERT_TRUE(before.ok()) << before.status();
  const std::vector<size_t> sizes = {0, 1, 7, 1000, 65537};
  std::vector<Bytes> values;
  for (size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(RandomBytes(rng, sizes[i]));
    ASSERT_TRUE(store.Set(absl::StrCat("conf/sg/", i), values.back()).ok());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto got = store.Get(absl::StrCat("conf/sg/", i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, values[i]) << "value of size " << sizes[i] << " changed in the store";
  }
  EXPECT_EQ(*store.NumKeys(), *before + static_cast<int64_t>(sizes.size()));
  // Overwrite.
  Bytes other = RandomBytes(rng, 33);
  ASSERT_TRUE(store.Set("conf/sg/1", other).ok());
  EXPECT_EQ(*store.Get("conf/sg/1"), other);
  EXPECT_EQ(*store.GetString("conf/sg/1"), std::string(other.begin(), other.end()));
  // Delete reports whether the key existed, and removes it.
  EXPECT_TRUE(*store.Delete("conf/sg/1"));
  EXPECT_FALSE(*store.Delete("conf/sg/1"));
  EXPECT_EQ(*store.NumKeys(), *before + static_cast<int64_t>(sizes.size()) - 1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Wait({"conf/sg/1"}, std::chrono::milliseconds(20))));
}

void CheckAdd(Store& store) {
  EXPECT_EQ(*store.Add("conf/add", 5), 5);
  EXPECT_EQ(*store.Add("conf/add", -12), -7);
  EXPECT_EQ(*store.Add("conf/add", 0), -7);
  EXPECT_EQ(*store.GetString("conf/add"), "-7");  // counters are decimal text, as in c10d
  ASSERT_TRUE(store.Set("conf/add_text", std::string("not a number")).ok());
  auto bad = store.Add("conf/add_text", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("conf/add_text"), std::string::npos) << bad.status();
}

void CheckCompareSet(Store& store) {
  const Bytes a = {1, 2, 3}, b = {9, 0, 9, 0}, c = {7};
  // Absent key + empty expected: sets it.
  EXPECT_EQ(*store.CompareSet("conf/cas", {}, a), a);
  // Mismatch: unchanged, returns what is stored.
  EXPECT_EQ(*store.CompareSet("conf/cas", c, b), a);
  EXPECT_EQ(*store.Get("conf/cas"), a);
  // Match: swaps.
  EXPECT_EQ(*store.CompareSet("conf/cas", a, b), b);
  EXPECT_EQ(*store.Get("conf/cas"), b);
  // Absent key + non-empty expected: nothing stored.
  EXPECT_TRUE(store.CompareSet("conf/cas_absent", a, b)->empty());
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Wait({"conf/cas_absent"}, std::chrono::milliseconds(10))));
}

void CheckTimeoutsNameTheKeys(Store& store) {
  const auto saved = store.timeout();
  store.set_timeout(std::chrono::milliseconds(100));
  auto got = store.Get("conf/never_set_key");
  store.set_timeout(saved);
  ASSERT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("conf/never_set_key"), std::string::npos) << got.status();
  ASSERT_TRUE(store.Set("conf/present", std::string("x")).ok());
  absl::Status waited = store.Wait({"conf/present", "conf/missing_a", "conf/missing_b"}, std::chrono::milliseconds(80));
  ASSERT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  EXPECT_NE(waited.message().find("conf/missing_a"), std::string::npos) << waited;
  EXPECT_NE(waited.message().find("conf/missing_b"), std::string::npos) << waited;
  EXPECT_EQ(waited.message().find("'conf/present'"), std::string::npos) << waited;
}

void CheckBlockingGetWakesOnSet(const StoreHandleFactory& handles) {
  auto reader = handles();
  auto writer = handles();
  std::mt19937 rng(99);
  const Bytes value = RandomBytes(rng, 513);
  // The reader starts waiting before the writer sets; whichever order the threads run in, the
  // reader must end with the value (a bounded wait: the store's timeout, not a sleep, limits it).
  absl::StatusOr<Bytes> got;
  absl::Status waited;
  std::thread t([&] {
    waited = reader->Wait({"conf/late"}, std::chrono::seconds(30));
    got = reader->Get("conf/late");
  });
  ASSERT_TRUE(writer->Set("conf/late", value).ok());
  t.join();
  ASSERT_TRUE(waited.ok()) << waited;
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
}

void CheckConcurrentAddsAreAtomic(const StoreHandleFactory& handles, int threads) {
  constexpr int kAddsPerThread = 50;
  std::vector<std::thread> pool;
  std::vector<int64_t> expected_part(threads, 0);
  std::vector<std::vector<int64_t>> seen(threads);
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto store = handles();
      std::mt19937 rng(t + 1);
      for (int i = 0; i < kAddsPerThread; ++i) {
        const int64_t delta = 1 + rng() % 1000;  // positive, so every result is distinct
        expected_part[t] += delta;
        auto r = store->Add("conf/counter", delta);
        if (!r.ok()) {
          ++errors;
          continue;
        }
        seen[t].push_back(*r);
      }
    });
  }
  for (auto& th : pool) th.join();
  ASSERT_EQ(errors.load(), 0);
  int64_t total = 0;
  std::set<int64_t> results;
  for (int t = 0; t < threads; ++t) {
    total += expected_part[t];
    results.insert(seen[t].begin(), seen[t].end());
  }
  EXPECT_EQ(*handles()->Add("conf/counter", 0), total);
  EXPECT_EQ(results.size(), static_cast<size_t>(threads * kAddsPerThread)) << "two Adds saw the same result";
}

void CheckLimitsAreEnforcedWithClearErrors(Store& store) {
  std::mt19937 rng(4242);
  // Keys: well under the limit works; one byte over is refused, naming the limit.
  const std::string long_key = "conf/limits/" + std::string(kMaxStoreKeyBytes / 2, 'k');
  ASSERT_TRUE(store.Set(long_key, std::string("fits")).ok());
  EXPECT_EQ(*store.GetString(long_key), "fits");
  const std::string too_long(kMaxStoreKeyBytes + 1, 'k');
  for (const absl::Status& s : {store.Set(too_long, std::string("x")), store.Get(too_long).status(),
                                store.Add(too_long, 1).status(), store.Wait({"conf/limits/a", too_long})}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("kMaxStoreKeyBytes"), std::string::npos) << s;
  }
  // Values: one at the limit round-trips byte for byte; one byte more is refused, naming the key.
  const Bytes biggest = RandomBytes(rng, kMaxStoreValueBytes);
  ASSERT_TRUE(store.Set("conf/limits/big", biggest).ok());
  auto back = store.Get("conf/limits/big");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == biggest) << "a value of exactly kMaxStoreValueBytes changed in the store";
  const Bytes over(kMaxStoreValueBytes + 1, 7);
  for (const absl::Status& s : {store.Set("conf/limits/over", over),
                                store.CompareSet("conf/limits/over", {}, over).status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("conf/limits/over"), std::string::npos) << s;
    EXPECT_NE(s.message().find("kMaxStoreValueBytes"), std::string::npos) << s;
  }
  // Wait lists: one key more than the limit is refused up front, not waited on.
  std::vector<std::string> many(kMaxStoreWaitKeys + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = absl::StrCat("conf/limits/w", i);
  absl::Status waited = store.Wait(many, std::chrono::seconds(30));
  EXPECT_TRUE(absl::IsInvalidArgument(waited)) << waited;
  EXPECT_NE(waited.message().find("kMaxStoreWaitKeys"), std::string::npos) << waited;
  // Nothing above stuck: the store still answers, and holds nothing it refused.
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Wait({"conf/limits/over"}, std::chrono::milliseconds(10))));
  EXPECT_TRUE(*store.Delete("conf/limits/big"));
  EXPECT_TRUE(*store.Delete(long_key));
}

void CheckWaitOnManyKeysEndsWhenTheLastArrives(const StoreHandleFactory& handles, int n) {
  auto waiter = handles();
  auto writer = handles();
  std::vector<std::string> keys;
  for (int i = 0; i + 1 < n; ++i) keys.push_back(absl::StrCat("conf/many/", i));
  std::vector<std::string> order = keys;
  keys.push_back(keys[n / 2]);  // a duplicate
  std::shuffle(order.begin(), order.end(), std::mt19937(n));
  absl::Status waited = absl::UnknownError("the Wait did not return");
  std::thread t([&] { waited = waiter->Wait(keys, std::chrono::seconds(120)); });
  // The first key comes and goes before the rest arrive; its second Set completes the Wait either way.
  ASSERT_TRUE(writer->Set(order[0], std::string("gone")).ok());
  ASSERT_TRUE(*writer->Delete(order[0]));
  for (size_t i = 1; i < order.size(); ++i) ASSERT_TRUE(writer->Set(order[i], std::to_string(i)).ok());
  ASSERT_TRUE(writer->Set(order[0], std::string("back")).ok());
  t.join();
  EXPECT_TRUE(waited.ok()) << waited;
  for (const auto& k : order) (void)writer->Delete(k);
}

}  // namespace tinyddp::dist::testing
