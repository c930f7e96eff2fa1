// The ladder's factory (dist/ddp/ladder/ladder.h).
#include "dist/ddp/ladder/ladder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/ddp/ladder/bucketed_ddp.h"
#include "dist/ddp/ladder/flat_ddp.h"
#include "dist/ddp/ladder/full_ddp.h"
#include "dist/ddp/ladder/naive_ddp.h"

namespace tinyddp::dist::ladder {

const std::vector<std::string>& RungNames() {
  static const auto* names = new std::vector<std::string>{"naive", "flat", "bucketed", "full"};
  return *names;
}

absl::StatusOr<std::unique_ptr<DataParallel>> CreateDataParallel(const std::string& name, nn::Module& module,
                                                                 std::shared_ptr<ProcessGroup> pg,
                                                                 const DdpOptions& options) {
  if (name == "full") {
    ASSIGN_OR_RETURN(std::unique_ptr<FullDdp> full, FullDdp::Create(module, std::move(pg), options));
    return std::unique_ptr<DataParallel>(std::move(full));
  }
  const char* only_full = options.comm_hook.run               ? "a comm hook"
                          : options.zero_stage != 0           ? "ZeRO-1 (zero_stage=1)"
                          : options.find_unused_parameters    ? "find_unused_parameters"
                          : !options.gradient_as_bucket_view ? "gradient_as_bucket_view=false"
                                                              : nullptr;
  if (only_full != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP ladder: ", only_full, " needs the full DistributedDataParallel (--ddp=full), not --ddp=", name));
  }
  if (name == "naive") {
    ASSIGN_OR_RETURN(std::unique_ptr<NaiveDdp> naive, NaiveDdp::Create(module, std::move(pg), options.tracer));
    return std::unique_ptr<DataParallel>(std::move(naive));
  }
  if (name == "flat") {
    ASSIGN_OR_RETURN(std::unique_ptr<FlatDdp> flat, FlatDdp::Create(module, std::move(pg), options.tracer));
    return std::unique_ptr<DataParallel>(std::move(flat));
  }
  if (name == "bucketed") {
    ASSIGN_OR_RETURN(std::unique_ptr<BucketedDdp> bucketed,
                     BucketedDdp::Create(module, std::move(pg), options.first_bucket_bytes, options.bucket_cap_bytes,
                                         options.tracer));
    return std::unique_ptr<DataParallel>(std::move(bucketed));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DDP ladder: unknown rung '", name, "'; expected one of ", absl::StrJoin(RungNames(), ", ")));
}

}  // namespace tinyddp::dist::ladder
