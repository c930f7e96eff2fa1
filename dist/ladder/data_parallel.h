// DataParallel: what a training loop needs from any of the four DDPs of the ladder - naive_ddp.h,
// flat_ddp.h, bucketed_ddp.h, and at the top DistributedDataParallel itself (dist/ddp/ddp.h, behind a
// small adapter in ladder.cc) - so the ladder's tests train them side by side and examples/ddp_mlp.cc and
// bench/ddp_step_bench.cc swap the production DDP for a lower rung with one flag (--ddp). Each rung is a
// small file of its own; docs/ddp_ladder.md climbs them in order and shows what each step up buys.
// The ladder is teaching code (dist/ladder/, a wing): the library never uses it.
//
// One iteration, whichever rung:
//   Variable out = dp.Forward(x);           // runs the module (the bucketed and full rungs arm their hooks)
//   autograd::Backward(loss(out));          // bucketed, full: gradients already travel while this runs
//   RETURN_IF_ERROR(dp.FinishBackward());   // naive, flat: all communication happens here; bucketed: the
//                                           // wait for the buckets in flight; full: DDP's status
//   optimizer.Step();                       // every rank sees the same averaged .grad
//
// Gradient accumulation (PyTorch's no_sync()): Forward(x, /*sync=*/false) makes the backward that follows
// only accumulate into .grad, and FinishBackward() after it communicates nothing; the next synchronised
// iteration averages the accumulated sums.
#ifndef TINYDDP_DIST_LADDER_DATA_PARALLEL_H_
#define TINYDDP_DIST_LADDER_DATA_PARALLEL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "autograd/variable.h"
#include "dist/process_group/process_group.h"

namespace tinyddp::dist::ladder {

class DataParallel {
 public:
  virtual ~DataParallel() = default;

  /// Runs the module on `input`. `sync` = false: the backward that follows accumulates locally (no_sync).
  /// Precondition: the previous synchronised forward's backward has run and FinishBackward was called.
  virtual autograd::Variable Forward(const autograd::Variable& input, bool sync = true) = 0;
  /// Call after autograd::Backward: when the forward was synchronised, every parameter's .grad then holds
  /// the average over ranks of the ranks' gradients (the same on every rank). Returns a collective's error.
  virtual absl::Status FinishBackward() = 0;

  /// How this rung communicates, for the program's header: a line, or DDP's bucket table.
  virtual std::string Describe() const = 0;
  /// The bytes of each all_reduce one synchronised iteration issues, in order (the timeline labels them).
  virtual std::vector<int64_t> AllReduceBytes() const = 0;
};

/// Collective: checks that every rank holds the same parameters (names, shapes, dtypes; ddp.h's
/// VerifyParametersMatchAcrossRanks) and copies rank 0's values to every rank, so training starts from one
/// model. Every rung calls it when it is created, as torch's DDP does.
absl::Status StartFromRankZero(ProcessGroup& pg,
                               const std::vector<std::pair<std::string, autograd::Variable>>& params);

/// The parameters of `params` that require grad (the ones that get gradients to average).
std::vector<autograd::Variable> TrainableParameters(
    const std::vector<std::pair<std::string, autograd::Variable>>& params);

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_LADDER_DATA_PARALLEL_H_
