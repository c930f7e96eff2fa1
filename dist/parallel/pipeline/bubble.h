// The measured bubble: each pipeline rank's idle fraction in one step, from the compute intervals the runtime
// recorded (pipeline_runtime.h), beside the formula, a piece of the pipeline wing. Megatron and zero-bubble
// users ask how to measure bubble time on a real run; this is one way: the step's window is the span from the
// first compute of any rank to the last compute of any rank, and a rank's idle fraction is the part of that
// window it did not compute in (waiting for a neighbour's activation or gradient, or for the pipeline to fill
// or drain). The formula (p-1)/(m+p-1) assumes every F and B of every stage costs the same and messages are
// free; the measurement has neither, which is the point of putting them side by side.
//
// The ranks' clocks are compared directly (steady_clock): the ranks must run on one machine, as they do for
// the table in docs/performance.md (Gloo ranks on one host's CPU cores).
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_BUBBLE_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_BUBBLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/parallel/pipeline/pipeline_runtime.h"
#include "dist/process_group/process_group.h"

namespace tinyddp::dist::pipeline {

/// Collective over the pipeline group (null for one rank): every rank's compute records of its last step,
/// by pipeline rank (one all_gather; every rank records the same number, 2 m v).
absl::StatusOr<std::vector<std::vector<ComputeRecord>>> GatherComputes(ProcessGroup* group, const StepRecord& step);

struct StepIdle {
  double window_us = 0;            // first compute start to last compute end, over all ranks
  std::vector<double> busy_us;     // by rank
  std::vector<double> idle;        // by rank: 1 - busy / window
  double mean_idle = 0;            // over the ranks
};
/// The idle fractions of one step from every rank's records.
StepIdle IdleOf(const std::vector<std::vector<ComputeRecord>>& computes);

/// The records as a Chrome trace (a process per rank, F and B per microbatch on the compute track), for
/// https://ui.perfetto.dev and tools/timeline; times relative to the step's first compute.
std::string ComputesAsChromeTrace(const std::vector<std::vector<ComputeRecord>>& computes);

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_BUBBLE_H_
