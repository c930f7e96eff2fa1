// The DDP ladder by name: the four rungs behind one factory - naive_ddp.h, flat_ddp.h, bucketed_ddp.h and
// at the top the production DistributedDataParallel (dist/ddp/ddp.h) itself - for the ladder's tests and
// docs/ddp_ladder.md, which climbs them with measurements and timelines. The programs that take
// --ddp=naive|flat|bucketed|full (examples/ddp_mlp.cc, bench/ddp_step_bench.cc) create DDP themselves for
// full, and come here for the three rungs below it.
#ifndef TINYDDP_DIST_LADDER_LADDER_H_
#define TINYDDP_DIST_LADDER_LADDER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ddp/ddp.h"
#include "dist/ladder/data_parallel.h"
#include "dist/observe/trace/trace.h"
#include "nn/module.h"

namespace tinyddp::dist::ladder {

/// The rungs, bottom to top: "naive", "flat", "bucketed", "full".
const std::vector<std::string>& RungNames();

/// Creates rung `name` over `module` (collective, like each rung's Create). Of `options`, bucketed and full
/// take the bucket sizes; full all of it (DistributedDataParallel::Create's options, behind the ladder's
/// interface). `tracer` (optional, not owned) records each rung's forward and all_reduces (full: its comm
/// hook wrapped by TracedCommHook). InvalidArgument for an unknown name, or for an option the rung does not
/// have (a comm hook, find_unused_parameters or gradient_as_bucket_view=false below full).
absl::StatusOr<std::unique_ptr<DataParallel>> CreateDataParallel(const std::string& name, nn::Module& module,
                                                                 std::shared_ptr<ProcessGroup> pg,
                                                                 const DdpOptions& options, Tracer* tracer = nullptr);

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_LADDER_LADDER_H_
