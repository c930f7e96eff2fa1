// FullDdp (dist/ddp/ladder/full_ddp.h): DistributedDataParallel behind the ladder's interface.
#include "dist/ddp/ladder/full_ddp.h"

#include <utility>

#include "base/status_macros.h"

namespace tinyddp::dist::ladder {

absl::StatusOr<std::unique_ptr<FullDdp>> FullDdp::Create(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                         DdpOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                   DistributedDataParallel::Create(module, std::move(pg), std::move(options)));
  return std::unique_ptr<FullDdp>(new FullDdp(std::move(ddp)));
}

autograd::Variable FullDdp::Forward(const autograd::Variable& input, bool sync) {
  if (sync) return ddp_->Forward(input);
  DistributedDataParallel::NoSyncGuard no_sync = ddp_->NoSync();  // only the Forward decides: see ddp.h
  return ddp_->Forward(input);
}

std::string FullDdp::Describe() const { return ddp_->BucketTable(); }

std::vector<int64_t> FullDdp::AllReduceBytes() const {
  std::vector<int64_t> bytes;
  for (int b = 0; b < ddp_->reducer().num_buckets(); ++b) bytes.push_back(ddp_->reducer().BucketBytes(b));
  return bytes;
}

}  // namespace tinyddp::dist::ladder
