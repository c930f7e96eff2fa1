// TEMPORARY stand-in for dist::DistributedDataParallel while its implementation lands: broadcasts rank
// 0's parameters, then after each backward all_reduces (average) every gradient in one coalesced call,
// from an end-of-backward callback. Same usage as DDP: Forward, then Backward does the rest.
#ifndef TINYDDP_EXAMPLES_INTERNAL_INTERIM_DDP_H_
#define TINYDDP_EXAMPLES_INTERNAL_INTERIM_DDP_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/engine.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace tinyddp::examples {

class InterimDdp {
 public:
  static absl::StatusOr<std::unique_ptr<InterimDdp>> Create(nn::Module& module, std::shared_ptr<dist::ProcessGroup> pg) {
    auto d = std::unique_ptr<InterimDdp>(new InterimDdp(module, std::move(pg)));
    for (const autograd::Variable& p : module.Parameters()) {
      absl::Status s = d->pg_->Broadcast(p.data(), 0)->Wait();
      if (!s.ok()) return s;
      InterimDdp* self = d.get();
      p.RegisterPostAccumulateGradHook([self](const autograd::Variable&) {
        if (self->queued_) return;
        self->queued_ = true;
        autograd::QueueCallback([self] { self->Sync(); });
      });
    }
    return d;
  }
  autograd::Variable Forward(const autograd::Variable& x) { return module_.Forward(x); }

 private:
  InterimDdp(nn::Module& module, std::shared_ptr<dist::ProcessGroup> pg) : module_(module), pg_(std::move(pg)) {}
  void Sync() {
    queued_ = false;
    std::vector<Tensor> grads;
    for (const autograd::Variable& p : module_.Parameters()) grads.push_back(p.grad());
    absl::Status s = pg_->AllReduceCoalesced(grads, dist::ReduceOp::kAvg)->Wait();
    if (!s.ok()) {
      std::fprintf(stderr, "gradient all_reduce failed: %s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
  }
  nn::Module& module_;
  std::shared_ptr<dist::ProcessGroup> pg_;
  bool queued_ = false;
};

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_INTERIM_DDP_H_
