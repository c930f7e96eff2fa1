// NaiveDdp: the first rung of the DDP ladder (data_parallel.h; docs/ddp_ladder.md climbs all four).
// Data parallelism in its plainest form: every rank runs forward and backward on its own batch, then,
// after backward, all-reduces each parameter's gradient - one blocking call per tensor - and divides the
// sum by the number of ranks. The gradients are then the ones a single process would get on the
// concatenated batch (for a loss that is a mean over the batch), so every rank takes the same step.
//
// What it costs, and what the next rungs change:
//   * one collective per parameter: each pays the fixed latency of a collective (flat_ddp.h packs them
//     into one);
//   * nothing overlaps: the network idles during backward and the processor idles during communication
//     (bucketed_ddp.h starts communicating while backward still runs).
// Works on CPU (Gloo) and GPU (NCCL); the host waits for every all_reduce. Not thread-safe.
#ifndef TINYDDP_DIST_LADDER_NAIVE_DDP_H_
#define TINYDDP_DIST_LADDER_NAIVE_DDP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ladder/comm_recorder.h"
#include "dist/ladder/data_parallel.h"
#include "dist/observe/trace/trace.h"
#include "nn/module.h"

namespace tinyddp::dist::ladder {

class NaiveDdp : public DataParallel {
 public:
  /// Collective: starts every rank from rank 0's weights (StartFromRankZero). `module` must outlive the
  /// result; `tracer` (optional, not owned) records each all_reduce.
  static absl::StatusOr<std::unique_ptr<NaiveDdp>> Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                          Tracer* tracer = nullptr);

  autograd::Variable Forward(const autograd::Variable& input, bool sync = true) override;
  /// All-reduces every gradient, one parameter at a time, waiting for each.
  absl::Status FinishBackward() override;
  std::string Describe() const override;
  std::vector<int64_t> AllReduceBytes() const override;

 private:
  NaiveDdp(nn::Module& module, std::shared_ptr<ProcessGroup> pg, Tracer* tracer);

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<autograd::Variable> params_;  // those that require grad
  CommRecorder comm_;                       // pg_->AllReduce, plus a record on --trace's timeline
  bool sync_ = true;                        // the last Forward's `sync`
};

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_LADDER_NAIVE_DDP_H_
