// Test helpers shared by the ZeRO-2 and ZeRO-3 tests (zero2_test.cc, zero3_test.cc, tests/zero/): the two
// optimizers every test runs, and a bit-for-bit comparison of named tensors.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_ZERO_TESTING_H_
#define TINYDDP_DIST_PARALLEL_ZERO_ZERO_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "nn/optimizer.h"
#include "nn/tensor_map.h"

namespace tinyddp::dist::zero_testing {

enum class Opt { kSgdMomentum, kAdamW };

/// SGD (lr 0.1, momentum 0.9, weight decay 1e-3) or AdamW (lr 1e-2), over `params`.
std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt kind, std::vector<autograd::Variable> params);
/// "SGD(momentum=0.9, wd)" or "AdamW".
const char* Name(Opt kind);

/// Expects two maps to hold the same names, shapes, dtypes and bits.
void ExpectSameBits(const nn::TensorMap& actual, const nn::TensorMap& expected, const std::string& what);
/// Expects two maps to hold the same names and shapes, and values within atol + rtol * |expected|.
void ExpectNear(const nn::TensorMap& actual, const nn::TensorMap& expected, double atol, double rtol,
                const std::string& what);

}  // namespace tinyddp::dist::zero_testing

#endif  // TINYDDP_DIST_PARALLEL_ZERO_ZERO_TESTING_H_
