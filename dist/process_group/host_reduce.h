// Element-wise reductions on host memory: the arithmetic inside ProcessGroupGloo's collectives.
//
// Gloo moves bytes and calls back into a reduction function `c[i] = a[i] op b[i]` for each chunk it
// receives; it ships such functions only for its own types. These cover every dtype a collective takes,
// bfloat16 included (each pair is combined in float32 and rounded back, as PyTorch's CPU bfloat16 does).
#ifndef TINYDDP_DIST_PROCESS_GROUP_HOST_REDUCE_H_
#define TINYDDP_DIST_PROCESS_GROUP_HOST_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/dtype.h"

namespace tinyddp::dist {

/// c[i] = a[i] op b[i] for n elements; c may alias a or b. Gloo's reduction signature.
using HostReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);

/// The reduction for `dtype` and `op`; kAvg reduces as kSum (divide afterwards with DivideInPlace).
/// Precondition: IsCollectiveDType(dtype).
HostReduceFn GetHostReduceFn(DType dtype, ReduceOp op);

/// data[i] /= divisor for n elements (integer dtypes truncate toward zero, like NCCL's integer average).
void DivideInPlace(void* data, size_t n, DType dtype, int divisor);

/// The dtypes collectives take: float32, float64, bfloat16, int32, int64.
bool IsCollectiveDType(DType dtype);

/// Calls f(T{}) with the C++ element type of `dtype` (float, double, BFloat16, int32_t, int64_t).
/// Precondition: IsCollectiveDType(dtype).
template <typename F>
void VisitCollectiveDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kBFloat16: f(BFloat16{}); return;
    case DType::kInt32: f(int32_t{}); return;
    case DType::kInt64: f(int64_t{}); return;
    default: return;
  }
}

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_HOST_REDUCE_H_
