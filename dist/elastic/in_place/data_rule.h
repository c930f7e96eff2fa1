// The data rule of in-place recovery: which samples each replica trains on, stated so that losing a
// replica mid-epoch loses no sample and repeats none.
//
// An epoch is one order of the whole training set (data::DistributedSampler with one replica: a function of
// (seed, epoch), the same on every rank). A step takes the next `members x batch_size` samples of that order
// from a cursor, and member i (its index in the membership, not its original rank) trains on the i-th slice.
// The cursor moves only when a step completes everywhere, so after a loss the step is redone from the same
// cursor with the survivors: the epoch's remaining samples are re-sharded over them, none lost or seen twice.
//
// What changes with the membership (what a PyTorch user expects from torchft's drop-the-replica):
//   * the per-replica batch stays --batch_size; the global batch shrinks to survivors x batch_size;
//   * DDP averages over the survivors, so a step's gradient is the mean over the global batch it saw;
//   * the learning rate stays the schedule's value at that step (no rescaling for the smaller batch);
//   * an epoch has more steps after a loss (it still ends when its samples run out).
// The epoch's tail: a last window with fewer than members x batch_size samples is split as evenly as possible
// (the first `remaining % members` members take one more); fewer samples than members are dropped (every
// replica must take part in the step's all_reduce with a non-empty batch), at most members - 1 per epoch.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_DATA_RULE_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_DATA_RULE_H_

#include <cstdint>

namespace tinyddp::dist::in_place {

/// One member's part of one step: positions [begin, begin + count) of the epoch's order.
struct StepSlice {
  int64_t begin = 0;
  int64_t count = 0;     // 0: the epoch is over (no step starts from this cursor)
  int64_t advance = 0;   // how far the cursor moves when the step completes (the whole window)
};

/// The slice of member `index` of `members` at `cursor` in an epoch of `epoch_size` samples.
/// Preconditions: members >= 1, 0 <= index < members, batch_size >= 1, 0 <= cursor <= epoch_size.
StepSlice SliceOfStep(int64_t epoch_size, int64_t cursor, int members, int index, int64_t batch_size);

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_DATA_RULE_H_
