// WeightGradDeferral: a backward that computes only the input gradients (B) and leaves the weight gradients (W)
// as work to run later, the split zero-bubble pipeline schedules need (Qi et al. 2023, ZB-H1; the pipeline wing,
// dist/parallel/pipeline/). The previous stage waits for B; nobody waits for W, so it can run in the bubbles.
//
//   std::vector<WeightGradWork> w;
//   {
//     WeightGradDeferral defer;              // on this thread, while alive
//     Backward(output, grad_of_output);      // B: input gradients only; .grad of weights untouched
//     w = defer.Take();
//   }
//   ...                                      // other work
//   for (auto& work : w) work();             // W: the weight and bias gradients, into .grad
//
// Which ops split: Linear and LinearRelu (autograd/linear.cc), whose weight and bias gradients are a GEMM and a
// column sum of the op's output gradient and input, kept until W runs (that is ZB's memory cost). Every other op
// runs whole inside B. A W adds into .grad exactly as the undeferred backward would have at that point: the same
// GEMM (beta 1 into a defined .grad, beta 0 into a fresh tensor or the gradient destination), so running each
// microbatch's W in the order its B ran gives the same bits as not deferring. Then the leaf's post-accumulate-grad
// hooks run (engine.h's contract moves with the gradient: "once, when final"). Not thread-safe; one deferral per
// thread at a time.
#ifndef TINYDDP_AUTOGRAD_WEIGHT_GRAD_DEFERRAL_H_
#define TINYDDP_AUTOGRAD_WEIGHT_GRAD_DEFERRAL_H_

#include <functional>
#include <vector>

namespace tinyddp::autograd {

using WeightGradWork = std::function<void()>;

class WeightGradDeferral {
 public:
  WeightGradDeferral();
  ~WeightGradDeferral();
  WeightGradDeferral(const WeightGradDeferral&) = delete;
  WeightGradDeferral& operator=(const WeightGradDeferral&) = delete;

  /// The work deferred so far, in the order backward produced it (later layers first); the deferral is empty after.
  std::vector<WeightGradWork> Take();
  /// For ops: the deferral alive on this thread, or null (then compute weight gradients at once).
  static WeightGradDeferral* Active();
  void Add(WeightGradWork work) { work_.push_back(std::move(work)); }

 private:
  std::vector<WeightGradWork> work_;
  WeightGradDeferral* previous_;
};

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_WEIGHT_GRAD_DEFERRAL_H_
