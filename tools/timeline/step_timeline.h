// StepTimeline: a DDP trace (chrome_trace.h) cut into training steps and read the way one reads its
// picture: per step and rank, when the rank computed (forward, backward, optimizer), when each bucket's
// all_reduce ran, and which part of that communication no computation hid - the *exposed*
// communication, by which a DDP step is longer than the same step without any communication.
//
// Tracks (dist/observe/trace/trace.h's TraceTrack): tid 0 host (the training thread), tid 1 GPU compute
// stream, tid 2 communication (one "all_reduce" span per bucket, args.i = the bucket; ZeRO-3 records
// "all_gather" and "reduce_scatter" spans instead, args.i = the layer; tensor parallelism "all_reduce (g)"
// and "all_reduce (f)", args.i = the layer). The compute lane is tid 1 when the
// trace has it (GPU) and tid 0 otherwise: on a CPU the training thread is the computation.
//
// Steps: each "forward" span on a rank's compute lane starts a step, which lasts until the next one
// starts (the last step: until the rank's last span ends). Without forward spans "step" spans mark the
// steps, else "backward" ones; a trace with none of them is one step. Step k is the k-th on every rank.
//
// Exposed communication, estimated from spans. The compute lane's backward span ends when the reducer's
// end-of-backward wait returns, so its tail is waiting, not computing. Backward's own computation ends
// no later than
//   - the start of the last all_reduce that starts inside it: the last bucket holds the gradients
//     computed last, and its all_reduce cannot start before they exist; and
//   - the start of the first span nested inside it: DDP's fused per-bucket optimizers run after the
//     gradients, inside the end-of-backward wait. Not a span named "optimizer in backward": a bucket's
//     update inside backward (--optimizer_in_backward), after which backward computes on.
// The compute lane is busy during all its spans (except "step", which only encloses the others), with
// backward cut at that estimate. Exposed = the communication spans' union minus busy time, per step.
// Parts: a forward or backward span may hold nested spans named after it and a word ("forward layer",
// "backward layer": ZeRO-3's per-layer compute, fully_sharded.h; tensor parallelism's, tensor_parallel_mlp.h).
// Such a phase is busy only during its parts (and other spans nested in it): the rest of it is waiting (for
// a layer's all_gather or an all_reduce, say), and no estimate is needed.
// When the last bucket had to queue behind the one before it, its start comes after the gradients'
// end and the estimate misses that stretch: exposed is then a lower bound.
#ifndef TINYDDP_TOOLS_TIMELINE_STEP_TIMELINE_H_
#define TINYDDP_TOOLS_TIMELINE_STEP_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/timeline/chrome_trace.h"

namespace tinyddp::dist {

/// The tracks of a tinyddp trace, as dist/observe/trace/trace.h numbers them.
inline constexpr int kHostLaneTid = 0;
inline constexpr int kComputeLaneTid = 1;
inline constexpr int kCommLaneTid = 2;
/// The name of a bucket's update recorded inside backward (--optimizer_in_backward): nested in backward, it
/// does not mark the end of backward's computation.
inline constexpr char kUpdateInBackward[] = "optimizer in backward";

struct TimeInterval {
  int64_t start_us = 0;
  int64_t end_us = 0;
  int64_t length_us() const { return end_us > start_us ? end_us - start_us : 0; }
};

/// One bucket's all_reduce on one rank in one step.
struct BucketComm {
  std::string name;  // the collective: "all_reduce" (DDP's buckets), "all_gather", "reduce_scatter" (ZeRO-3),
                    // "all_reduce (g)", "all_reduce (f)" (tensor parallelism)
  int bucket = -1;  // args.i (the bucket, or for ZeRO-3 the layer); -1 when the span had none
  int64_t start_us = 0;
  int64_t end_us = 0;
  int64_t bytes = -1;  // args.bytes, else StepTimelineOptions::bucket_bytes[bucket], else -1
  std::string path;    // args.path; else "Gloo" on a Gloo lane (its only path); else empty
  int64_t duration_us() const { return end_us - start_us; }
};

/// One step as one rank saw it.
struct RankStep {
  int64_t start_us = 0;            // the step's forward start (compute lane)
  int64_t end_us = 0;              // the next step's forward start, or the rank's last span end
  std::vector<TraceSpan> compute;  // compute-lane spans that start in the step
  std::vector<TraceSpan> host;     // host-lane spans overlapping the step in time (GPU traces only: the
                                   // thread runs ahead, so these may belong to later steps)
  std::vector<BucketComm> comm;    // communication spans that start in the step, by start
  /// Per backward span of the step without parts: where its own computation ended (the estimate above).
  std::vector<TimeInterval> backward_compute;
  std::vector<TimeInterval> busy;     // the compute lane's busy time (merged, sorted)
  std::vector<TimeInterval> exposed;  // communication beside no busy time (merged, sorted)

  int64_t step_us() const { return end_us - start_us; }
  int64_t ExposedUs() const;
  /// Length of the union of the communication spans (within the step).
  int64_t CommUs() const;
  /// Sum of the lengths of the compute-lane spans named `name`, cut to the step.
  int64_t SpanUs(const std::string& name) const;
};

struct StepTimeline {
  bool on_gpu = false;                       // the trace has a GPU compute lane (tid 1)
  std::vector<std::string> rank_names;       // the processes' names ("rank 0", ...)
  std::string comm_lane_name;                // rank 0's communication lane's name
  std::string backend;                       // "Gloo" or "NCCL" when that name says so, else empty
  int total_steps = 0;                       // steps found on every rank
  int first_step = 0;                        // 0-based ordinal of steps[0] among them
  std::vector<std::vector<RankStep>> steps;  // [shown step][rank]

  int num_ranks() const { return static_cast<int>(rank_names.size()); }
  /// Means over the shown steps and all ranks.
  double MeanStepUs() const;
  double MeanExposedUs() const;
  double MeanCommUs() const;
  double MeanSpanUs(const std::string& name) const;
};

struct StepTimelineOptions {
  /// Keep only the last `last_steps` steps (0: all). The first step of a run is unlike the others (DDP
  /// rebuilds its buckets after it), so pictures show the last ones.
  int last_steps = 0;
  /// Bytes of bucket i, for traces whose spans carry no args.bytes (DDP's reducer knows them:
  /// Reducer::BucketBytes).
  std::vector<int64_t> bucket_bytes;
};

/// Cuts `trace` into steps as the header describes. FailedPrecondition when the trace holds no span.
absl::StatusOr<StepTimeline> BuildStepTimeline(const ChromeTrace& trace, const StepTimelineOptions& options = {});

/// True when `span` is a part of `phase` (the header's "Parts"): nested in it and named "<phase> <word>".
bool IsPartOf(const TraceSpan& span, const TraceSpan& phase);
/// True when `phase` (a forward or backward span of `compute`) holds parts.
bool HasParts(const TraceSpan& phase, const std::vector<TraceSpan>& compute);

/// Sorted, merged union of `intervals` (empty ones dropped).
std::vector<TimeInterval> UnionOf(std::vector<TimeInterval> intervals);
/// `from` minus `minus`; both sorted and merged (UnionOf), as is the result.
std::vector<TimeInterval> Subtract(const std::vector<TimeInterval>& from, const std::vector<TimeInterval>& minus);

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_STEP_TIMELINE_H_
