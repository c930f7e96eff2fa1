// The collective sweep shared by the Gloo (CPU) and NCCL (GPU) tests: every collective x reduce op x
// dtype x size, each result checked against the value computed locally.
//
// Every rank can compute every other rank's input (a hash of case, rank and index), so each rank knows
// the exact expected result without communicating. Inputs are small integers, so sums,
// products, minima and maxima are exact in every dtype (bfloat16 holds integers up to 256 exactly),
// whatever order the backend reduces in; only AVG, a division, is compared with a tolerance.
// The Check* functions record gtest failures; call them inside RunOnRanks.
#ifndef TINYDDP_DIST_TESTING_COLLECTIVE_CHECKS_H_
#define TINYDDP_DIST_TESTING_COLLECTIVE_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::testing {

struct SweepOptions {
  Device device = Device::CPU();
  std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64};
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};
  std::vector<int64_t> sizes = {0, 1, 7, (int64_t{1} << 20) + 3};
};

/// Element `index` of rank `rank`'s input in one case: a small integer from a hash of (case, rank, index),
/// so any rank can recompute any other rank's input cheaply. {-2,-1,1,2} for PRODUCT, 0..8 for integer
/// AVG (so the truncating division is unambiguous), -8..8 otherwise.
double InputValue(uint64_t case_key, int rank, int64_t index, ReduceOp op, DType dtype);

/// Elements [offset, offset + n) of rank `rank`'s input.
std::vector<double> RankInput(int rank, int64_t offset, int64_t n, uint64_t case_key, ReduceOp op, DType dtype);

/// Elements [offset, offset + n) of the reduction over all `world` ranks' inputs, as the backend should
/// compute it (AVG divides the sum by `world`, truncating for integer dtypes).
std::vector<double> ExpectedReduction(int world, int64_t offset, int64_t n, uint64_t case_key, ReduceOp op,
                                      DType dtype);

/// A tensor of `dtype` on `device` holding `values`; and its contents back as doubles.
Tensor MakeTensor(const std::vector<double>& values, DType dtype, Device device);
std::vector<double> ReadTensor(const Tensor& tensor);

/// Records one gtest failure (with the first mismatching elements) unless `got` matches `want`.
void ExpectValues(const std::vector<double>& got, const std::vector<double>& want, DType dtype, ReduceOp op,
                  const std::string& what);

/// The sweep, one collective at a time. Each issues all sizes of a (dtype, op) before waiting, so the
/// backend also runs several collectives in flight.
void CheckAllReduce(ProcessGroup& pg, const SweepOptions& options);
void CheckAllReduceCoalesced(ProcessGroup& pg, const SweepOptions& options);
void CheckBroadcast(ProcessGroup& pg, const SweepOptions& options);
void CheckAllGather(ProcessGroup& pg, const SweepOptions& options);
void CheckReduceScatter(ProcessGroup& pg, const SweepOptions& options);
void CheckReduce(ProcessGroup& pg, const SweepOptions& options);

}  // namespace tinyddp::dist::testing

#endif  // TINYDDP_DIST_TESTING_COLLECTIVE_CHECKS_H_
