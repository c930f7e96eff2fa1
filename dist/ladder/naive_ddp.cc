// NaiveDdp (dist/ladder/naive_ddp.h): after backward, one blocking all_reduce per gradient.
#include "dist/ladder/naive_ddp.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::dist::ladder {

absl::StatusOr<std::unique_ptr<NaiveDdp>> NaiveDdp::Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                           Tracer* tracer) {
  RETURN_IF_ERROR(StartFromRankZero(*pg, module.NamedParameters()));
  return std::unique_ptr<NaiveDdp>(new NaiveDdp(module, std::move(pg), tracer));
}

NaiveDdp::NaiveDdp(nn::Module& module, std::shared_ptr<ProcessGroup> pg, Tracer* tracer)
    : module_(module), pg_(std::move(pg)), params_(TrainableParameters(module.NamedParameters())),
      comm_(*pg_, tracer) {}

autograd::Variable NaiveDdp::Forward(const autograd::Variable& input, bool sync) {
  Tracer::Span span = Tracer::MaybeScope(comm_.tracer(), "forward");  // as DDP's own Forward does
  sync_ = sync;  // nothing else to prepare: all the work happens after backward
  return module_.Forward(input);
}

absl::Status NaiveDdp::FinishBackward() {
  if (!sync_) return absl::OkStatus();  // no_sync: keep accumulating locally
  const double world = pg_->size();
  for (size_t i = 0; i < params_.size(); ++i) {
    // Every rank must call the same collectives in the same order, so a parameter that got no gradient
    // on this rank still takes part, with zeros.
    if (!params_[i].grad().defined()) {
      params_[i].set_grad(Tensor::Zeros(params_[i].shape(), params_[i].dtype(), params_[i].device()));
    }
    Tensor grad = params_[i].grad();
    // The sum over ranks, in place; Wait() blocks until it has arrived (on a GPU it also orders the
    // compute stream after it).
    const absl::Status status = comm_.AllReduce(grad, ReduceOp::kSum, static_cast<int>(i))->Wait();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("naive DDP: all_reduce of gradient '", params_[i].name(),
                                                      "' failed: ", status.message()));
    }
    // The average: what one process computing the mean loss over all ranks' examples would get.
    ops::ScaleInPlace(grad, 1.0 / world);
  }
  comm_.Flush();
  return absl::OkStatus();
}

std::string NaiveDdp::Describe() const {
  return absl::StrFormat("naive DDP: after backward, %d blocking all_reduces (one per gradient tensor) over %d "
                         "ranks of %s",
                         params_.size(), pg_->size(), pg_->backend_name());
}

std::vector<int64_t> NaiveDdp::AllReduceBytes() const {
  std::vector<int64_t> bytes;
  for (const autograd::Variable& p : params_) bytes.push_back(static_cast<int64_t>(p.data().nbytes()));
  return bytes;
}

}  // namespace tinyddp::dist::ladder
