#include "dist/elastic/in_place/data_rule.h"

#include <vector>

#include "gtest/gtest.h"

namespace tinyddp::dist::in_place {
namespace {

// Runs an epoch whose membership shrinks at the given steps and counts how often each position is trained.
std::vector<int> CountsOverAnEpoch(int64_t epoch_size, int64_t batch, std::vector<int> members_at_step) {
  std::vector<int> seen(epoch_size, 0);
  int64_t cursor = 0;
  for (size_t step = 0;; ++step) {
    const int members = members_at_step[std::min(step, members_at_step.size() - 1)];
    int64_t advance = 0;
    for (int i = 0; i < members; ++i) {
      const StepSlice slice = SliceOfStep(epoch_size, cursor, members, i, batch);
      if (slice.count == 0) return seen;
      for (int64_t p = slice.begin; p < slice.begin + slice.count; ++p) ++seen[p];
      advance = slice.advance;
    }
    cursor += advance;
  }
}

TEST(DataRule, ShrinkingMidEpochTrainsEverySampleExactlyOnce) {
  // 1000 samples, batch 7: 4 members for 5 steps, then 3 for 4 steps, then 2 to the end.
  std::vector<int> members = {4, 4, 4, 4, 4, 3, 3, 3, 3, 2};
  const std::vector<int> seen = CountsOverAnEpoch(1000, 7, members);
  for (int64_t p = 0; p < 1000; ++p) EXPECT_EQ(seen[p], 1) << "position " << p;
}

TEST(DataRule, TailShorterThanTheMembersIsDroppedAndNothingElse) {
  // 4 * 7 * 3 = 84 samples plus 3: the last window (3 samples) is shorter than 4 members.
  const std::vector<int> seen = CountsOverAnEpoch(87, 7, {4});
  for (int64_t p = 0; p < 84; ++p) EXPECT_EQ(seen[p], 1) << "position " << p;
  for (int64_t p = 84; p < 87; ++p) EXPECT_EQ(seen[p], 0) << "position " << p;
}

TEST(DataRule, ShortLastWindowIsSplitEvenly) {
  // 30 samples left for 4 members of batch 10: 8, 8, 7, 7.
  const int64_t counts[] = {8, 8, 7, 7};
  int64_t next = 70;
  for (int i = 0; i < 4; ++i) {
    const StepSlice slice = SliceOfStep(100, 70, 4, i, 10);
    EXPECT_EQ(slice.begin, next);
    EXPECT_EQ(slice.count, counts[i]);
    EXPECT_EQ(slice.advance, 30);
    next += slice.count;
  }
}

TEST(DataRule, PerReplicaBatchStaysWhenTheMembershipShrinks) {
  EXPECT_EQ(SliceOfStep(1000, 0, 4, 3, 16).count, 16);
  EXPECT_EQ(SliceOfStep(1000, 64, 3, 2, 16).count, 16);
  EXPECT_EQ(SliceOfStep(1000, 64, 3, 2, 16).advance, 48);  // the global batch shrinks
}

}  // namespace
}  // namespace tinyddp::dist::in_place
