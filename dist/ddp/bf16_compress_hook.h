// Bf16CompressHook: torch's bf16_compress_hook, the other built-in comm hook (comm_hooks.h has the
// interface and the default). A program opts in through DdpOptions::comm_hook (ddp_mlp --comm_hook=bf16);
// kept apart from the default so that a program using the default does not build it.
#ifndef TINYDDP_DIST_DDP_BF16_COMPRESS_HOOK_H_
#define TINYDDP_DIST_DDP_BF16_COMPRESS_HOOK_H_

#include "dist/ddp/comm_hooks.h"

namespace tinyddp::dist {

/// bf16 compression (torch's bf16_compress_hook): casts the float32 bucket to bfloat16 (half the bytes on
/// the wire), averages that over ranks, and casts the result back into the bucket. Gradients lose
/// precision (8 bits of mantissa) but stay identical on every rank. Each returned hook keeps one bf16
/// scratch buffer per bucket, allocated on first use and reused, so steady-state steps allocate nothing.
/// Path: "NCCL all_reduce, bf16" (or Gloo's).
CommHook Bf16CompressHook();

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_BF16_COMPRESS_HOOK_H_
