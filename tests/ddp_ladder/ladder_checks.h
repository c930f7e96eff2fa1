// The claims the DDP ladder's tests make on every backend (ddp_ladder_test: Gloo on CPU processes;
// ddp_ladder_gpu_test: NCCL on GPUs), written once and called from a RunOnRanks body.
#ifndef TINYDDP_TESTS_DDP_LADDER_LADDER_CHECKS_H_
#define TINYDDP_TESTS_DDP_LADDER_LADDER_CHECKS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "dist/process_group/process_group.h"
#include "tensor/device.h"

namespace tinyddp::dist::ladder_testing {

/// The four rungs, each wrapping its own copy of one odd-sized MLP (ranks start from different weights, so
/// the broadcast from rank 0 is tested too), trained in lockstep with SGD (momentum, weight decay) on the
/// same per-rank batches. After every step each rung's weights must match one process trained on the
/// concatenated batch of all ranks (within float rounding: the ranks' sums are added in another order), and
/// every rank must hold the same bits. The bucketed and full rungs use small buckets (several per model).
/// Collective: every rank of `pg` calls it. `device`: where this rank's model lives.
void ExpectEveryRungMatchesOneProcess(ProcessGroup& pg, Device device);

/// Gradient accumulation through rung `rung`: k micro-batches of b examples each (k-1 backwards under
/// no_sync, each micro-batch's mean loss weighted by its share b/(k*b) of the examples through the seed
/// of autograd::Backward), then one synchronised backward, must equal one step on the k*b examples
/// together, for several optimizer steps. Equal up to float rounding only: the same gradient sums are
/// added in a different order (k partial sums instead of one GEMM over k*b rows).
void ExpectAccumulationMatchesOneLargeBatch(ProcessGroup& pg, Device device, const std::string& rung);

}  // namespace tinyddp::dist::ladder_testing

#endif  // TINYDDP_TESTS_DDP_LADDER_LADDER_CHECKS_H_
