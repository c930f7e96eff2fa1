// FlatDdp: the second rung of the DDP ladder (data_parallel.h; docs/ddp_ladder.md). Same moment as
// naive_ddp.h - after backward - but one collective instead of one per tensor: every gradient is copied
// into one flat buffer, the buffer is all-reduced once (ReduceOp::kAvg: the sum and the division by the
// number of ranks in one collective), and the averages are copied back into the gradients. PyTorch's
// tutorial calls it "merge small tensors": a collective has a fixed cost (a round trip between ranks, a
// kernel launch) that a model of many small tensors pays once instead of once per tensor, and a large
// message moves at the link's full bandwidth.
//
// What it costs: two copies of every gradient per step (in and out), and still no overlap - the
// network idles during backward. bucketed_ddp.h starts all-reducing the last layers' gradients while
// backward is still computing the first layers'.
// Precondition: all gradients share one dtype (one buffer). CPU (Gloo) and GPU (NCCL). Not thread-safe.
#ifndef TINYDDP_DIST_LADDER_FLAT_DDP_H_
#define TINYDDP_DIST_LADDER_FLAT_DDP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ladder/comm_recorder.h"
#include "dist/ladder/data_parallel.h"
#include "dist/observe/trace/trace.h"
#include "nn/module.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::ladder {

class FlatDdp : public DataParallel {
 public:
  /// Collective: starts every rank from rank 0's weights and allocates the flat buffer (once).
  /// InvalidArgument when the trainable parameters do not share one dtype. `module` must outlive the
  /// result; `tracer` (optional, not owned) records the all_reduce.
  static absl::StatusOr<std::unique_ptr<FlatDdp>> Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                         Tracer* tracer = nullptr);

  autograd::Variable Forward(const autograd::Variable& input, bool sync = true) override;
  /// Packs every gradient into the flat buffer, all-reduces it once (waiting), unpacks the averages.
  absl::Status FinishBackward() override;
  std::string Describe() const override;
  std::vector<int64_t> AllReduceBytes() const override;

 private:
  FlatDdp(nn::Module& module, std::shared_ptr<ProcessGroup> pg, Tracer* tracer);

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<autograd::Variable> params_;  // those that require grad
  Tensor flat_;                             // every gradient, end to end, in params_ order
  std::vector<Tensor> slices_;              // slices_[i]: params_[i]'s place in flat_ (1-D views)
  CommRecorder comm_;                       // pg_->AllReduce, plus a record on --trace's timeline
  bool sync_ = true;                        // the last Forward's `sync`
};

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_LADDER_FLAT_DDP_H_
