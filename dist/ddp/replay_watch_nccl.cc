// The replay watch for CUDA builds (dist/ddp/replay_watch.h): ProcessGroupNCCL's.
#include <utility>

#include "dist/ddp/replay_watch.h"
#include "dist/process_group/nccl/process_group_nccl.h"

namespace tinyddp::dist {

std::vector<std::string> TakeCapturedCollectives(ProcessGroup& pg) {
  if (auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg)) return nccl->TakeCapturedCollectives();
  return {};
}

std::shared_ptr<Work> WatchReplay(ProcessGroup& pg, std::string description) {
  if (auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg)) return nccl->WatchReplay(std::move(description));
  return nullptr;
}

}  // namespace tinyddp::dist
