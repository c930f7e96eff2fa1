// Exercise 2, a reference solution: fp16 bits packed in int32 words, one AllGather, the mean of the
// unpacked halves written back in `then`. Per rank this receives (n-1) x numel x 2 bytes: half of a
// float32 ring all_reduce's 2(n-1)/n x numel x 4 on 2 ranks, the same on 4, more beyond (docs/exercises.md).
#include "tests/exercises/compress_hook/fp16_compress_hook.h"

#include <memory>
#include <vector>

#include "tests/exercises/compress_hook/fp16.h"

namespace tinyddp::exercises {
namespace {

// One bucket's words: this rank's halves, and every rank's after the all-gather. Held by pointer so
// that a future's `then` keeps a stable address while later buckets grow the list.
struct Scratch {
  Tensor mine, all;
};

}  // namespace

dist::CommHook Fp16CompressHook() {
  auto scratch = std::make_shared<std::vector<std::unique_ptr<Scratch>>>();
  dist::CommHook hook;
  hook.path = [](const dist::ProcessGroup&, const dist::GradBucket&) { return "all_gather, fp16"; };
  hook.run = [scratch](dist::ProcessGroup& pg, dist::GradBucket& bucket) -> dist::CommFuture {
    while (scratch->size() <= static_cast<size_t>(bucket.index)) scratch->push_back(std::make_unique<Scratch>());
    Scratch& s = *(*scratch)[bucket.index];
    const int64_t words = (bucket.numel + 1) / 2;  // two halves per int32
    if (!s.mine.defined() || s.mine.numel() != words) {
      s.mine = Tensor::Zeros({words}, DType::kInt32);
      s.all = Tensor::Empty({words * pg.size()}, DType::kInt32);
    }
    uint16_t* halves = reinterpret_cast<uint16_t*>(s.mine.data<int32_t>());
    int64_t i = 0;
    for (const Tensor& g : bucket.gradients) {
      const float* x = g.data<float>();
      for (int64_t k = 0; k < g.numel(); ++k) halves[i++] = FloatToHalf(x[k]);
    }
    dist::CommFuture future;
    future.work = pg.AllGather(s.all, s.mine);
    Scratch* sp = &s;
    dist::GradBucket* bp = &bucket;
    const int n = pg.size();
    future.then = [sp, bp, words, n] {
      const uint16_t* every = reinterpret_cast<const uint16_t*>(sp->all.data<int32_t>());
      int64_t i = 0;
      for (Tensor& g : bp->gradients) {
        float* x = g.data<float>();
        for (int64_t k = 0; k < g.numel(); ++k, ++i) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += HalfToFloat(every[2 * words * r + i]);
          x[k] = sum / static_cast<float>(n);
        }
      }
    };
    return future;
  };
  return hook;
}

}  // namespace tinyddp::exercises
