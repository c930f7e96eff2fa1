// The one kernel of the copy-engine all_reduce (copy_engine_all_reduce.h): dst = (dst + src) * scale over
// one rank's half of a bucket. Everything else that path does is copies and stream memory operations,
// which need no SM; this kernel has a capped grid (two blocks per SM) and runs on a high-priority stream,
// so that it slips in between the blocks of the backward GEMMs it runs beside.
#ifndef TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_REDUCE_H_
#define TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_REDUCE_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace tinyddp::dist::copy_engine {

/// Enqueues dst[i] = (dst[i] + src[i]) * scale for i < n on `stream`. float32; any alignment.
cudaError_t LaunchAddScale(float* dst, const float* src, int64_t n, float scale, cudaStream_t stream);

}  // namespace tinyddp::dist::copy_engine

#endif  // TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_REDUCE_H_
