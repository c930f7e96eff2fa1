// The process group's side of a CUDA-graph replay (dist/ddp/graphed_step.h): which collectives a capture
// recorded, and the watchdog that watches each replay. A seam with two implementations, like
// comm_stream.h: replay_watch_nccl.cc asks ProcessGroupNCCL, replay_watch_stub.cc (a build without CUDA,
// or a group that runs on host threads) has neither. Keeps NCCL out of GraphedStep's dependencies.
#ifndef TINYDDP_DIST_DDP_REPLAY_WATCH_H_
#define TINYDDP_DIST_DDP_REPLAY_WATCH_H_

#include <memory>
#include <string>
#include <vector>

#include "dist/process_group/process_group.h"
#include "dist/process_group/work.h"

namespace tinyddp::dist {

/// The descriptions of the collectives `pg` recorded into a graph since the last call
/// (ProcessGroupNCCL::TakeCapturedCollectives); empty for other groups.
std::vector<std::string> TakeCapturedCollectives(ProcessGroup& pg);

/// Hands the replay just enqueued on the current stream to `pg`'s watchdog, under the group's timeout
/// (ProcessGroupNCCL::WatchReplay). Null for a group that cannot watch GPU work (it has none in a graph).
std::shared_ptr<Work> WatchReplay(ProcessGroup& pg, std::string description);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_REPLAY_WATCH_H_
