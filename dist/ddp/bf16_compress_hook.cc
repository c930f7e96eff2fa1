// Bf16CompressHook: see bf16_compress_hook.h.
#include "dist/ddp/bf16_compress_hook.h"

#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::dist {

namespace {

// One bucket's bf16 copy: a flat buffer and, for the coalesced layout, its slice for each gradient.
struct Bf16Scratch {
  Tensor flat;
  std::vector<Tensor> slices;
};

// Makes (once) or reuses the bf16 scratch of `bucket`: reallocated only if the bucket changed (rebuild).
// Held by pointer so that a future's `then` keeps a stable address while later buckets grow the list.
Bf16Scratch& ScratchFor(std::vector<std::unique_ptr<Bf16Scratch>>& all, const GradBucket& bucket) {
  while (all.size() <= static_cast<size_t>(bucket.index)) all.push_back(std::make_unique<Bf16Scratch>());
  Bf16Scratch& s = *all[bucket.index];
  int64_t numel = 0;
  Device device = Device::CPU();
  if (bucket.buffer.defined()) {
    numel = bucket.buffer.numel();
    device = bucket.buffer.device();
  } else {
    for (const Tensor& g : bucket.gradients) numel += g.numel();
    if (!bucket.gradients.empty()) device = bucket.gradients[0].device();
  }
  const bool fits = s.flat.defined() && s.flat.numel() == numel && s.flat.device() == device &&
                    (bucket.buffer.defined() || s.slices.size() == bucket.gradients.size());
  if (!fits) {
    s.flat = Tensor::Empty({numel}, DType::kBFloat16, device);
    s.slices.clear();
    int64_t offset = 0;
    for (const Tensor& g : bucket.gradients) {
      s.slices.push_back(s.flat.Rows(offset, offset + g.numel()));
      offset += g.numel();
    }
  }
  return s;
}

}  // namespace

CommHook Bf16CompressHook() {
  auto scratch = std::make_shared<std::vector<std::unique_ptr<Bf16Scratch>>>();
  CommHook hook;
  hook.path = [](const ProcessGroup& pg, const GradBucket&) {
    return std::string(pg.backend_name()) == "nccl" ? "NCCL all_reduce, bf16" : "Gloo all_reduce, bf16";
  };
  hook.run = [scratch](ProcessGroup& pg, GradBucket& bucket) -> CommFuture {
    Bf16Scratch& s = ScratchFor(*scratch, bucket);
    // Compress on the current stream, as part of backward: float32 -> bfloat16 (round to nearest even).
    if (bucket.buffer.defined()) {
      TINYDDP_CHECK_OP(bucket.buffer.dtype() == DType::kFloat32, "Bf16CompressHook", "bucket ", bucket.index,
                       " holds ", DTypeName(bucket.buffer.dtype()), " gradients; hint: the hook compresses float32");
      ops::CastInto(s.flat, bucket.buffer);
    } else {
      for (size_t i = 0; i < bucket.gradients.size(); ++i) ops::CastInto(s.slices[i], bucket.gradients[i].Flatten());
    }
    CommFuture future;
    future.work = pg.AllReduce(s.flat, ReduceOp::kAvg);
    // Decompress once the average has arrived: the reducer runs `then` after ordering the current stream
    // behind the collective. The bucket record and the scratch outlive the future (the reducer and the
    // hook own them).
    Bf16Scratch* sp = &s;
    GradBucket* bp = &bucket;
    future.then = [sp, bp] {
      if (bp->buffer.defined()) {
        ops::CastInto(bp->buffer, sp->flat);
        return;
      }
      for (size_t i = 0; i < bp->gradients.size(); ++i) {
        Tensor flat = bp->gradients[i].Flatten();
        ops::CastInto(flat, sp->slices[i]);
      }
    };
    return future;
  };
  return hook;
}

}  // namespace tinyddp::dist
