// Test helpers shared by the DDP tests (dist/ddp/ddp_test.cc, dist/reducer_test.cc,
// tests/ddp_equivalence_test.cc): deterministic batches, a Gloo group for a RunOnRanks rank, and the two
// comparisons every DDP test makes - against a single-process reference, and across ranks bit for bit.
#ifndef TINYDDP_DIST_TESTING_DDP_TESTING_H_
#define TINYDDP_DIST_TESTING_DDP_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group/process_group.h"
#include "dist/testing/multi_process.h"
#include "nn/module.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::ddp_testing {

/// A classification batch: x [n, features] uniform in [-1, 1), labels int64 [n] in [0, classes).
struct Batch {
  Tensor x;
  Tensor labels;
};
/// The same (n, features, classes, seed) gives the same batch in every process.
Batch MakeBatch(int64_t n, int64_t features, int64_t classes, uint64_t seed, Device device = Device::CPU());
/// Rows [begin, end) of a batch (a copy, on the same device).
Batch Rows(const Batch& batch, int64_t begin, int64_t end);

/// A Gloo group over the rank's store (ASSERTs inside on failure; returns null then).
std::shared_ptr<ProcessGroup> MakeGlooGroup(const testing::RankContext& ctx);

/// Expects every parameter of `module` to hold the same bits on every rank of `pg`. Collective.
void ExpectBitIdenticalAcrossRanks(ProcessGroup& pg, const nn::Module& module, const std::string& when);
/// Expects the parameters of `a` and `b` (same names and shapes) to agree within atol + rtol * |b|.
void ExpectParametersNear(const nn::Module& a, const nn::Module& b, double atol, double rtol, const std::string& when);
/// Expects two tensors (same numel) to agree within atol + rtol * |expected|.
void ExpectTensorNear(const Tensor& actual, const Tensor& expected, double atol, double rtol, const std::string& what);

/// Adds rank-dependent noise to every parameter, so a test can see DDP's broadcast from rank 0 undo it.
void PerturbParameters(const nn::Module& module, int rank);

}  // namespace tinyddp::dist::ddp_testing

#endif  // TINYDDP_DIST_TESTING_DDP_TESTING_H_
