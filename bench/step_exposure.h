// StepExposure: how much of a DDP step's communication no computation hid, read from one rank's trace
// events (dist/ddp/trace.h, Tracer::EventsJson) - the "exposed communication" column of ddp_step_bench's
// --ddp and --sweep_buckets tables (docs/ddp_ladder.md).
//
// Per step (a "step" span on the compute lane: tid 1, the GPU compute stream, when the trace has it; tid 0,
// the training thread, on a CPU): the compute lane is busy during its spans, except that a "backward" span
// also contains DDP's end-of-backward wait, so its own computation is taken to end at the start of the last
// all_reduce that starts inside it (that bucket holds the gradients computed last) or at the first other
// span nested in it (fused optimizers), whichever is first. Exposed = the union of the communication spans
// (tid 2) minus the busy time. For the naive and flat rungs, whose all_reduces all run after backward, that
// is the time from backward's end to the last all_reduce's end. The same rule as the trace's SVG picture.
#ifndef TINYDDP_BENCH_STEP_EXPOSURE_H_
#define TINYDDP_BENCH_STEP_EXPOSURE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp::bench {

/// Means over the steps of one rank's trace, in microseconds.
struct StepExposure {
  int steps = 0;
  double step_us = 0;     // the "step" spans' length
  double comm_us = 0;     // the union of the communication spans
  double exposed_us = 0;  // the part of it beside no computation
};

/// `events_json`: comma-separated Chrome trace events of one rank, as Tracer::EventsJson returns them (a
/// bare "[...]" array is accepted too). InvalidArgument when it is not JSON; FailedPrecondition when it
/// holds no "step" span.
absl::StatusOr<StepExposure> MeasureStepExposure(absl::string_view events_json);

}  // namespace tinyddp::bench

#endif  // TINYDDP_BENCH_STEP_EXPOSURE_H_
