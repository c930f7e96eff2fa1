// What each rank holds, gathered into one table that rank 0 prints once: the parameters, the gradients and
// the optimizer state a rank keeps between steps, and the most tensor memory it held at once. The figures
// ZeRO's stages are about (docs/zero.md), side by side with plain DDP's, for ddp_mlp and ddp_step_bench.
//
// Two kinds of numbers: the three "held" columns are the bytes of the tensors each piece of the wing owns
// (its shards, blocks, buffers), exact and the same on every run; "peak" comes from the allocator (the
// host's counters in tensor/storage.h, or the CUDA caching allocator's), so it also counts activations,
// batches, staging buffers and everything else alive at the worst moment of a step.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_MEMORY_TABLE_H_
#define TINYDDP_DIST_PARALLEL_ZERO_MEMORY_TABLE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/process_group/process_group.h"
#include "nn/optimizer.h"
#include "tensor/device.h"

namespace tinyddp::dist::zero {

/// One rank's bytes.
struct RankMemory {
  int64_t parameters = 0;       // what forward computes with, kept between steps (bf16 copies included)
  int64_t gradients = 0;        // kept between steps, or the buffers they pass through
  int64_t optimizer_state = 0;  // momentum, Adam's moments (per element; scalars left out)
  int64_t peak = 0;             // allocator: the most live tensor bytes above a baseline (PeakAbove)
};

/// Plain DDP: the module's parameters (and compute copies), the reducer's buckets (or, coalesced, the
/// parameters' gradients), and the state of `optimizer` and of `also` (a fused optimizer's per-bucket ones).
RankMemory HeldBy(DistributedDataParallel& ddp, const nn::Optimizer& optimizer,
                  const std::vector<const nn::Optimizer*>& also = {});
/// ZeRO-1 and -2 (ShardMemory).
RankMemory HeldBy(const ZeroRedundancyOptimizer& zero);
/// ZeRO-3 (FullyShardedMemory).
RankMemory HeldBy(const FullyShardedDataParallel& fsdp);

/// Bytes of live tensors on `device` now: the host's (GetHostMemoryStats) or the GPU's (allocated bytes).
int64_t LiveTensorBytes(Device device);
/// Starts a peak measurement: the host's high-water mark restarts at the live bytes now (a GPU's cannot be
/// reset: its peak then counts since the process started). Returns the live bytes now, the baseline.
int64_t StartPeak(Device device);
/// The most live tensor bytes on `device` since StartPeak, minus `baseline`.
int64_t PeakAbove(Device device, int64_t baseline);

/// Collective over `pg`: every rank's figures (one all_gather of 4 numbers); rank 0 gets the table, a line
/// per rank under `title`, the others an empty string.
absl::StatusOr<std::string> GatherMemoryTable(ProcessGroup& pg, const RankMemory& mine, const std::string& title);

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_MEMORY_TABLE_H_
