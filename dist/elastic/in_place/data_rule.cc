// SliceOfStep: see data_rule.h.
#include "dist/elastic/in_place/data_rule.h"

#include <algorithm>

namespace tinyddp::dist::in_place {

StepSlice SliceOfStep(int64_t epoch_size, int64_t cursor, int members, int index, int64_t batch_size) {
  const int64_t remaining = epoch_size - cursor;
  if (remaining < members) return {cursor, 0, 0};  // the tail too short for every member: dropped
  const int64_t window = std::min<int64_t>(remaining, members * batch_size);
  // Even split of the window: the first window % members members take one more.
  const int64_t base = window / members, extra = window % members;
  const int64_t begin = cursor + index * base + std::min<int64_t>(index, extra);
  return {begin, base + (index < extra ? 1 : 0), window};
}

}  // namespace tinyddp::dist::in_place
