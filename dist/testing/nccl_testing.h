// ConnectNccl: a GPU test's rank joins an NCCL group, as every *_gpu_test of DDP, ZeRO and tensor
// parallelism does before it compares anything: this rank's GPU current, a compute stream of its own (not the
// legacy default stream, which would serialise with the group's), and a group with a generous timeout, so that
// a hang in a test ends as a failure.
#ifndef TINYDDP_DIST_TESTING_NCCL_TESTING_H_
#define TINYDDP_DIST_TESTING_NCCL_TESTING_H_

#include <chrono>
#include <memory>

#include "dist/process_group/process_group.h"
#include "dist/testing/multi_process.h"

namespace tinyddp::dist::testing {

/// The NCCL group of `ctx`'s rank on GPU ctx.rank; null (and a test failure) when it cannot be set up.
std::shared_ptr<ProcessGroup> ConnectNccl(const RankContext& ctx,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace tinyddp::dist::testing

#endif  // TINYDDP_DIST_TESTING_NCCL_TESTING_H_
