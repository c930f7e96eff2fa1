// The copy-engine all_reduce's schedule (copy_engine_plan.h): the split, the chunks, and one call's
// operations in enqueue order, steps numbered as in copy_engine_all_reduce.h.
#include "dist/accel/copy_engine/copy_engine_plan.h"

#include <algorithm>

namespace tinyddp::dist::copy_engine {

namespace {

int64_t RoundUp(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

}  // namespace

int64_t SplitPoint(int64_t n, const PlanOptions& options) { return std::min(n, RoundUp((n + 1) / 2, options.align)); }

Chunks ChunksOf(Range half, const PlanOptions& options) {
  Chunks c;
  const int64_t len = half.size();
  if (len <= 0) return c;
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, len / options.min_chunk));
  const int64_t size = RoundUp((len + count - 1) / count, options.align);
  for (int64_t lo = half.lo; lo < half.hi; lo += size) c.chunk[c.count++] = Range{lo, std::min(half.hi, lo + size)};
  return c;
}

Planner::Planner(int rank, PlanOptions options) : rank_(rank), options_(options) {}

bool Planner::OverlapsPrevious(absl::Span<const ByteRange> ranges) {
  bool overlaps = false;
  for (const auto& [lo, hi] : ranges) {
    for (const auto& [plo, phi] : last_ranges_) overlaps = overlaps || (lo < phi && plo < hi);
  }
  last_ranges_.assign(ranges.begin(), ranges.end());  // keeps its capacity: no allocation per call
  return overlaps;
}

void Planner::Add(Op::Kind kind, PlanStream stream, int index, uint32_t value) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.index = index;
  op.value = value;
  ops_.push_back(op);
}

void Planner::AddCopy(PlanStream stream, Memory dst, int64_t dst_at, Memory src, int64_t src_at, int64_t count) {
  Op op;
  op.kind = Op::Kind::kCopy;
  op.stream = stream;
  op.dst = dst;
  op.dst_at = dst_at;
  op.src = src;
  op.src_at = src_at;
  op.count = count;
  ops_.push_back(op);
}

const std::vector<Op>& Planner::Next(int64_t n, absl::Span<const ByteRange> ranges, bool direct) {
  using K = Op::Kind;
  constexpr PlanStream kCopies = PlanStream::kCopies, kHelper = PlanStream::kHelper, kDrain = PlanStream::kDrain;
  ops_.clear();
  const uint32_t seq = ++seq_;
  const int64_t split = SplitPoint(n, options_);
  const Range mine = rank_ == 0 ? Range{0, split} : Range{split, n};
  const Range theirs = rank_ == 0 ? Range{split, n} : Range{0, split};
  const Chunks my_chunks = ChunksOf(mine, options_), their_chunks = ChunksOf(theirs, options_);

  // Reuse: at most two calls in flight (this one waits for the end of call seq - 2, held by the event it
  // is about to record again), and a call on the previous call's memory waits for that call's end.
  if (seq > 2) Add(K::kWaitEvent, kCopies, EndEvent(seq));
  if (OverlapsPrevious(ranges) && seq > 1) Add(K::kWaitEvent, kCopies, EndEvent(seq - 1));
  // The helper and drain streams start after everything the copies stream waits for (the gradients).
  Add(K::kRecord, kCopies, kStartEvent);
  Add(K::kWaitEvent, kHelper, kStartEvent);
  Add(K::kWaitEvent, kDrain, kStartEvent);

  // 1. Copies: my values of the peer's half into its IN, chunk by chunk, each announced (DATA). The
  //    peer's IN is free once it has reduced all of the previous call: its last DONE of that call.
  if (seq > 1 && last_peer_chunks_ > 0) Add(K::kWaitFlag, kCopies, kDoneFlag + last_peer_chunks_ - 1, seq - 1);
  for (int j = 0; j < their_chunks.count; ++j) {
    const Range c = their_chunks.chunk[j];
    AddCopy(kCopies, Memory::kPeerIn, c.lo - theirs.lo, Memory::kTensors, c.lo, c.size());
    Add(K::kSignal, kCopies, kDataFlag + j, seq);
  }
  last_peer_chunks_ = their_chunks.count;

  // 2-3. Helper: as each chunk of the peer's values of my half arrives, reduce it into my tensors.
  for (int j = 0; j < my_chunks.count; ++j) {
    const Range c = my_chunks.chunk[j];
    Add(K::kWaitFlag, kHelper, kDataFlag + j, seq);
    Op reduce;
    reduce.kind = K::kReduce;
    reduce.stream = kHelper;
    reduce.dst = Memory::kTensors;
    reduce.dst_at = c.lo;
    reduce.src = Memory::kIn;
    reduce.src_at = c.lo - mine.lo;
    reduce.count = c.size();
    ops_.push_back(reduce);
    Add(K::kRecord, kHelper, kReducedEvent0 + j);
  }

  // 4. Copies: each reduced chunk into the peer's OUT (announced: DONE) as soon as it is reduced. The
  //    peer's OUT is free once its drain emptied it for the previous call (FREE). A direct call writes the
  //    chunk into the same place of the peer's buffer instead, whose values there the peer sent us in
  //    step 1, before its DATA, and no longer needs.
  if (seq > 1 && !direct) Add(K::kWaitFlag, kCopies, kFreeFlag, seq - 1);
  for (int j = 0; j < my_chunks.count; ++j) {
    const Range c = my_chunks.chunk[j];
    Add(K::kWaitEvent, kCopies, kReducedEvent0 + j);
    if (direct) {
      AddCopy(kCopies, Memory::kPeerTensors, c.lo, Memory::kTensors, c.lo, c.size());
    } else {
      AddCopy(kCopies, Memory::kPeerOut, c.lo - mine.lo, Memory::kTensors, c.lo, c.size());
    }
    Add(K::kSignal, kCopies, kDoneFlag + j, seq);
  }
  Add(K::kRecord, kCopies, kSentEvent);  // my tensors are read by my copies until here

  // 5-6. Drain: as each reduced chunk of the peer's half arrives in my OUT, into my tensors (a direct
  //      call's arrives in my buffer itself).
  for (int j = 0; j < their_chunks.count; ++j) {
    const Range c = their_chunks.chunk[j];
    Add(K::kWaitFlag, kDrain, kDoneFlag + j, seq);
    if (!direct) AddCopy(kDrain, Memory::kTensors, c.lo, Memory::kOut, c.lo - theirs.lo, c.size());
  }
  // 7. Drain: my OUT is free (FREE); the call is complete once my copies, which came after my additions,
  //    are too.
  Add(K::kSignal, kDrain, kFreeFlag, seq);
  Add(K::kWaitEvent, kDrain, kSentEvent);
  Add(K::kRecord, kDrain, EndEvent(seq));
  Add(K::kRecord, kDrain, kDoneEvent);
  return ops_;
}

}  // namespace tinyddp::dist::copy_engine
