// FlatDdp (dist/ladder/flat_ddp.h): after backward, pack, one all_reduce, unpack.
#include "dist/ladder/flat_ddp.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::dist::ladder {

absl::StatusOr<std::unique_ptr<FlatDdp>> FlatDdp::Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                         Tracer* tracer) {
  const std::vector<autograd::Variable> params = TrainableParameters(module.NamedParameters());
  for (const autograd::Variable& p : params) {
    if (p.dtype() != params[0].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flat DDP: one buffer holds every gradient, so they must share a dtype, but '", p.name(), "' is ",
          DTypeName(p.dtype()), " and '", params[0].name(), "' is ", DTypeName(params[0].dtype()),
          "; hint: use --ddp=bucketed or --ddp=full, which bucket each dtype apart"));
    }
  }
  RETURN_IF_ERROR(StartFromRankZero(*pg, module.NamedParameters()));
  return std::unique_ptr<FlatDdp>(new FlatDdp(module, std::move(pg), tracer));
}

FlatDdp::FlatDdp(nn::Module& module, std::shared_ptr<ProcessGroup> pg, Tracer* tracer)
    : module_(module), pg_(std::move(pg)), params_(TrainableParameters(module.NamedParameters())),
      comm_(*pg_, tracer) {
  int64_t numel = 0;
  for (const autograd::Variable& p : params_) numel += p.numel();
  flat_ = Tensor::Empty({numel}, params_.empty() ? DType::kFloat32 : params_[0].dtype(),
                        params_.empty() ? Device::CPU() : params_[0].device());
  int64_t offset = 0;
  for (const autograd::Variable& p : params_) {
    slices_.push_back(flat_.Rows(offset, offset + p.numel()));
    offset += p.numel();
  }
}

autograd::Variable FlatDdp::Forward(const autograd::Variable& input, bool sync) {
  Tracer::Span span = Tracer::MaybeScope(comm_.tracer(), "forward");  // as DDP's own Forward does
  sync_ = sync;  // nothing else to prepare: all the work happens after backward
  return module_.Forward(input);
}

absl::Status FlatDdp::FinishBackward() {
  if (!sync_) return absl::OkStatus();  // no_sync: keep accumulating locally
  // Pack. A parameter that got no gradient on this rank contributes zeros (every rank sends the same
  // buffer layout).
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& grad = params_[i].grad();
    if (grad.defined()) {
      ops::CopyInto(slices_[i], grad.Flatten());
    } else {
      ops::Fill(slices_[i], 0);
    }
  }
  // One collective for the whole model. kAvg: the backend divides by the number of ranks as it sums.
  const absl::Status status = comm_.AllReduce(flat_, ReduceOp::kAvg, /*index=*/0)->Wait();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("flat DDP: all_reduce of the ", flat_.nbytes(),
                                                    "-byte gradient buffer failed: ", status.message()));
  }
  comm_.Flush();
  // Unpack: the averages back into each .grad (made now for a parameter that had none).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) {
      params_[i].set_grad(Tensor::Empty(params_[i].shape(), params_[i].dtype(), params_[i].device()));
    }
    Tensor grad = params_[i].grad().Flatten();
    ops::CopyInto(grad, slices_[i]);
  }
  return absl::OkStatus();
}

std::string FlatDdp::Describe() const {
  return absl::StrFormat("flat DDP: after backward, %d gradient tensors packed into one %d-byte buffer, one "
                         "all_reduce over %d ranks of %s, unpacked",
                         params_.size(), flat_.nbytes(), pg_->size(), pg_->backend_name());
}

std::vector<int64_t> FlatDdp::AllReduceBytes() const { return {static_cast<int64_t>(flat_.nbytes())}; }

}  // namespace tinyddp::dist::ladder
