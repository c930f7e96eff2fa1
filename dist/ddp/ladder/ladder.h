// The DDP ladder by name: the four rungs (naive_ddp.h, flat_ddp.h, bucketed_ddp.h, full_ddp.h) behind one
// factory, for the programs that take --ddp=naive|flat|bucketed|full (examples/ddp_mlp.cc,
// bench/ddp_step_bench.cc). docs/ddp_ladder.md climbs them with measurements and timelines.
#ifndef TINYDDP_DIST_DDP_LADDER_LADDER_H_
#define TINYDDP_DIST_DDP_LADDER_LADDER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/ladder/data_parallel.h"
#include "nn/module.h"

namespace tinyddp::dist::ladder {

/// The rungs, bottom to top: "naive", "flat", "bucketed", "full".
const std::vector<std::string>& RungNames();

/// Creates rung `name` over `module` (collective, like each rung's Create). Of `options`, every rung takes
/// the tracer; bucketed and full the bucket sizes; full all of it (DistributedDataParallel's options).
/// InvalidArgument for an unknown name, or for an option the rung does not have (a comm hook,
/// find_unused_parameters or gradient_as_bucket_view=false below full).
absl::StatusOr<std::unique_ptr<DataParallel>> CreateDataParallel(const std::string& name, nn::Module& module,
                                                                 std::shared_ptr<ProcessGroup> pg,
                                                                 const DdpOptions& options);

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_DDP_LADDER_LADDER_H_
