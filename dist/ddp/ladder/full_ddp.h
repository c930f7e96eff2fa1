// FullDdp: the top of the DDP ladder (data_parallel.h; docs/ddp_ladder.md) - the production
// DistributedDataParallel (dist/ddp/ddp.h) behind the ladder's interface, so a training loop runs it and
// the three teaching rungs alike. Everything happens inside Forward and autograd::Backward: the Reducer
// (dist/ddp/reducer.h) launches buckets from the gradient hooks, its gradients are views into the buckets
// (no copies), the buckets are rebuilt once in the order gradients really arrive, and the end-of-backward
// wait is queued inside autograd itself - so FinishBackward has nothing left to do.
#ifndef TINYDDP_DIST_DDP_LADDER_FULL_DDP_H_
#define TINYDDP_DIST_DDP_LADDER_FULL_DDP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ladder/data_parallel.h"
#include "nn/module.h"

namespace tinyddp::dist::ladder {

class FullDdp : public DataParallel {
 public:
  /// DistributedDataParallel::Create(module, pg, options): collective, same preconditions.
  static absl::StatusOr<std::unique_ptr<FullDdp>> Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                         DdpOptions options = {});

  /// ddp->Forward(input), inside ddp->NoSync() when `sync` is false.
  autograd::Variable Forward(const autograd::Variable& input, bool sync = true) override;
  /// Nothing left to do: the reducer has already waited for every bucket at the end of autograd::Backward.
  /// Returns DDP's status (DistributedDataParallel::status()): the error of a bucket's failed all_reduce.
  absl::Status FinishBackward() override { return ddp_->status(); }
  /// DDP's bucket table (DistributedDataParallel::BucketTable).
  std::string Describe() const override;
  std::vector<int64_t> AllReduceBytes() const override;

  DistributedDataParallel& ddp() { return *ddp_; }

 private:
  explicit FullDdp(std::unique_ptr<DistributedDataParallel> ddp) : ddp_(std::move(ddp)) {}
  std::unique_ptr<DistributedDataParallel> ddp_;
};

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_DDP_LADDER_FULL_DDP_H_
