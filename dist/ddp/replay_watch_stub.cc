// The replay watch without CUDA (dist/ddp/replay_watch.h): no group records graphs, none watches replays.
#include "dist/ddp/replay_watch.h"

namespace tinyddp::dist {

std::vector<std::string> TakeCapturedCollectives(ProcessGroup&) { return {}; }

std::shared_ptr<Work> WatchReplay(ProcessGroup&, std::string) { return nullptr; }

}  // namespace tinyddp::dist
