// Exercise 2 (docs/exercises.md): a DDP communication hook that sends gradients in half precision.
// dist/ddp/comm_hooks.h explains hooks; bf16_compress_hook.h beside it all-reduces bfloat16 buckets; there is no
// float16 dtype to all-reduce, so this one all-gathers everyone's fp16 bits and averages them itself.
// fp16_compress_hook.cc is yours to write; reference/ holds a solution, for after.
#ifndef TINYDDP_TESTS_EXERCISES_COMPRESS_HOOK_FP16_COMPRESS_HOOK_H_
#define TINYDDP_TESTS_EXERCISES_COMPRESS_HOOK_FP16_COMPRESS_HOOK_H_

#include "dist/ddp/comm_hooks.h"

namespace tinyddp::exercises {

/// A hook whose `run` rounds every gradient of the bucket to fp16 (FloatToHalf, fp16.h), packs the
/// halves two per int32 element, starts one AllGather of them and returns; whose future's `then` unpacks
/// every rank's halves (HalfToFloat) and leaves their mean, computed in float32, in the bucket's
/// gradients. The result is the same on every rank. CPU (Gloo) buckets of float32 only. `path` names it
/// ("all_gather, fp16").
dist::CommHook Fp16CompressHook();

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_COMPRESS_HOOK_FP16_COMPRESS_HOOK_H_
