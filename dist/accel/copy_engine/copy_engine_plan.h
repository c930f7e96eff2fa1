// The schedule of the copy-engine all_reduce (copy_engine_all_reduce.h) as plain data: for one call, every
// operation of each of its three streams, in the order they are enqueued, and the signals they wait for.
// No CUDA here. CopyEngineAllReduce::Enqueue turns a plan into CUDA calls one operation at a time, and
// copy_engine_plan_test runs the plans of two simulated ranks on the CPU under thousands of random
// interleavings of their streams: the protocol's safety is tested without a GPU.
//
// What a plan decides (copy_engine_all_reduce.h says why the protocol has these steps):
//   * the split: the call's tensors are seen as one vector of n elements; rank 0 reduces [0, split),
//     rank 1 [split, n). split is `align`-aligned, so both halves start on a 256-byte boundary;
//   * the chunking: each half moves in at most kMaxChunks even chunks of at least `min_chunk` elements,
//     cut from the half's length only, so the rank that sends a half and the rank that owns it cut alike;
//   * sequence numbers: call k (counting from 1) signals the value k; "wait for the peer's step of call k"
//     is "wait until my flag >= k";
//   * reuse rules, which let calls pipeline without ever overwriting what is still needed:
//       - the peer's IN is written for call k only after its last DONE of call k-1 (it has read IN);
//       - the peer's OUT only after its FREE of call k-1 (it has emptied OUT), unless the call is direct
//         (registered buffers: the reduced half goes straight into the peer's buffer, OUT is unused);
//       - at most two calls in flight: call k starts after the end of call k-2;
//       - a call whose tensors overlap the previous call's starts after that call's end (with the rule
//         above, after the end of every earlier call on that memory).
// Not thread-safe; one Planner per rank and module.
#ifndef TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_PLAN_H_
#define TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_PLAN_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace tinyddp::dist::copy_engine {

/// Chunks per half at most. Measured on 2x H200 inside DDP's backward (medium MLP, ms/step): 1 chunk 2.56,
/// 2 chunks 2.51, 4 chunks 2.48, 16 chunks 2.62; every chunk costs a few microseconds of signalling,
/// which small chunks do not earn back.
inline constexpr int kMaxChunks = 4;

struct PlanOptions {
  /// Fewest elements in a chunk (1 Mi floats = 4 MiB) ...
  int64_t min_chunk = int64_t{1} << 20;
  /// ... and the multiple every chunk and the split are rounded to (64 floats = 256 bytes, so copies and
  /// the vectorised addition run aligned). Tests use small values to cover many chunk counts cheaply.
  int64_t align = 64;
};

/// Elements [lo, hi) of a call's tensors seen as one vector.
struct Range {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t size() const { return hi - lo; }
  bool operator==(const Range& o) const { return lo == o.lo && hi == o.hi; }
};

/// Rank 0 reduces [0, SplitPoint(n)), rank 1 [SplitPoint(n), n): rank 0's half is the larger by at most
/// `align` elements (the scratch each rank needs is this many elements for IN, and as many for OUT).
int64_t SplitPoint(int64_t n, const PlanOptions& options);

/// The chunks of `half`: as many whole min_chunk as fit, at least 1 and at most kMaxChunks, cut evenly
/// (a 16 MiB weight with its bias is two chunks, not two and a sliver), each rounded up to `align`, the
/// last one shorter. An empty half has no chunks.
struct Chunks {
  int count = 0;
  Range chunk[kMaxChunks];
};
Chunks ChunksOf(Range half, const PlanOptions& options);

/// The three streams of a call. kCopies is the process group's stream: the call starts there, ordered
/// after the gradients. kHelper runs the additions at high priority; kDrain takes in what the peer sends
/// back and ends the call.
enum class PlanStream : uint8_t { kCopies = 0, kHelper = 1, kDrain = 2 };
inline constexpr int kNumPlanStreams = 3;

/// Memory an operation reads or writes. Positions in kTensors and kPeerTensors count in the call's tensors
/// seen as one vector; positions in the scratch areas from their start.
enum class Memory : uint8_t {
  kTensors,      // my tensors
  kIn,           // my IN: the peer's values of my half land here
  kOut,          // my OUT: the reduced chunks of the peer's half land here
  kPeerIn,       // the peer's IN, mapped here
  kPeerOut,      // the peer's OUT, mapped here
  kPeerTensors,  // the peer's registered buffer paired with my tensor (direct calls only)
};

/// Words of a rank's flag area. The peer writes them (kSignal), the rank waits on them (kWaitFlag).
inline constexpr int kDataFlag = 0;    // + j: the peer's values of chunk j of my half are in my IN
inline constexpr int kDoneFlag = 64;   // + j: reduced chunk j of the peer's half is in my OUT (or my buffer)
inline constexpr int kFreeFlag = 128;  // the peer's OUT may be written again
inline constexpr int kNumFlags = 136;

/// Events of a rank. kDoneEvent is the caller's (the group's Work ends there); the others belong to the
/// module and are recorded again by later calls.
enum PlanEvent : int {
  kStartEvent = 0,                      // the call's start on kCopies: kHelper and kDrain begin after it
  kSentEvent = 1,                       // kCopies has read my tensors for the last time in this call
  kEndEvent0 = 2,                       // the end of calls with an even number, kEndEvent0 + 1 of odd ones
  kReducedEvent0 = 4,                   // + j: chunk j of my half is reduced
  kDoneEvent = kReducedEvent0 + kMaxChunks,
  kNumPlanEvents,
};

/// One operation of a plan, to be enqueued on `stream` after the plan's earlier operations.
struct Op {
  enum class Kind : uint8_t {
    kRecord,     // record `index` (a PlanEvent) on `stream`
    kWaitEvent,  // `stream` waits for the most recent recording of event `index` (cudaStreamWaitEvent)
    kWaitFlag,   // `stream` waits until my flag `index` >= `value` (in wrap-around order)
    kSignal,     // `stream` writes `value` into the peer's flag `index`
    kCopy,       // `stream` copies `count` elements from src[src_at...] to dst[dst_at...]
    kReduce,     // `stream` computes dst[dst_at + i] = (dst[dst_at + i] + src[src_at + i]) * scale, i < count
  };
  Kind kind = Kind::kRecord;
  PlanStream stream = PlanStream::kCopies;
  int index = 0;
  uint32_t value = 0;
  Memory dst = Memory::kTensors;
  Memory src = Memory::kTensors;
  int64_t dst_at = 0;
  int64_t src_at = 0;
  int64_t count = 0;
};

/// A tensor's bytes [first, second), for the overlap rule.
using ByteRange = std::pair<uintptr_t, uintptr_t>;

class Planner {
 public:
  explicit Planner(int rank, PlanOptions options = {});

  /// The plan of the next call: `n` elements in all, `ranges` the byte ranges of its tensors, `direct`
  /// when its one tensor is a registered buffer paired with the peer's (both ranks must agree). The
  /// returned list is valid until the next call; after the first calls nothing is allocated.
  const std::vector<Op>& Next(int64_t n, absl::Span<const ByteRange> ranges, bool direct);

  /// The sequence number of the last planned call (0 before the first).
  uint32_t seq() const { return seq_; }
  /// Ahead of every sequence number this rank will reach, in the wrap-around order the waits use: written
  /// into every flag, it releases every wait (the peer died; results are garbage from then on).
  uint32_t ReleaseValue() const { return seq_ + (1u << 30); }
  /// The event that holds the end of call `seq` (until call seq + 2 records it again).
  static int EndEvent(uint32_t seq) { return kEndEvent0 + static_cast<int>(seq % 2); }
  const PlanOptions& options() const { return options_; }

 private:
  // True when `ranges` overlap the previous call's; remembers them for the next call.
  bool OverlapsPrevious(absl::Span<const ByteRange> ranges);
  void Add(Op::Kind kind, PlanStream stream, int index, uint32_t value = 0);
  void AddCopy(PlanStream stream, Memory dst, int64_t dst_at, Memory src, int64_t src_at, int64_t count);

  const int rank_;
  const PlanOptions options_;
  uint32_t seq_ = 0;
  int last_peer_chunks_ = 0;        // chunks of the peer's half in the previous call
  std::vector<ByteRange> last_ranges_;
  std::vector<Op> ops_;
};

}  // namespace tinyddp::dist::copy_engine

#endif  // TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_PLAN_H_
