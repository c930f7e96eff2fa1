// Exercise 2, a known WRONG solution, kept so that CI proves the check rejects it
// (:rejects_wrong_solution). It rounds every gradient to fp16 and back, then all-reduces the float32
// results: the bucket ends as the mean of the fp16-rounded gradients, on every rank, exactly what the
// exercise asks for in numbers, and it names its path "fp16". But four bytes per gradient still go over
// the wire: nothing was compressed. Only a look at the collective it issued tells the two apart.
#include "tests/exercises/compress_hook/fp16_compress_hook.h"

#include "tests/exercises/compress_hook/fp16.h"

namespace tinyddp::exercises {

dist::CommHook Fp16CompressHook() {
  dist::CommHook hook;
  hook.path = [](const dist::ProcessGroup&, const dist::GradBucket&) { return "all_reduce, fp16"; };
  hook.run = [](dist::ProcessGroup& pg, dist::GradBucket& bucket) -> dist::CommFuture {
    for (Tensor& g : bucket.gradients) {
      float* x = g.data<float>();
      for (int64_t k = 0; k < g.numel(); ++k) x[k] = HalfToFloat(FloatToHalf(x[k]));  // rounded...
    }
    dist::CommFuture future;
    future.work = pg.AllReduce(bucket.buffer, dist::ReduceOp::kAvg);  // ...but sent as float32
    return future;
  };
  return hook;
}

}  // namespace tinyddp::exercises
