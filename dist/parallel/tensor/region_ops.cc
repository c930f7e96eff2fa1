// f and g, the conjugate ops (dist/parallel/tensor/region_ops.h): each backward beside its forward, as the
// ops of autograd/functions.h are written; then the two markers that time a layer's backward for the trace.
#include "dist/parallel/tensor/region_ops.h"

#include <utility>

#include "autograd/engine.h"
#include "autograd/node.h"

namespace tinyddp::dist::tensor_parallel {

using autograd::Grads;
using autograd::NeedsGrad;
using autograd::Variable;

Variable CopyToTensorParallelRegion(const Variable& x, std::shared_ptr<TensorParallelComm> comm, LayerLabel layer) {
  return autograd::Record(
      "CopyToTensorParallelRegion", x.data(), {x},
      [comm = std::move(comm), layer = std::move(layer)](const Tensor& dy, const NeedsGrad&) -> Grads {
        Tensor sum = dy.Clone();  // dy may be held elsewhere by the engine: sum a copy
        comm->AllReduceSum(sum, layer, "input gradient (backward of f)", kBackwardAllReduceName);
        return {sum};
      });
}

Variable ReduceFromTensorParallelRegion(const Variable& partial, std::shared_ptr<TensorParallelComm> comm,
                                        LayerLabel layer) {
  Tensor sum = partial.data().Clone();  // the input stays this rank's partial sum
  comm->AllReduceSum(sum, layer, "output (forward of g)", kForwardAllReduceName);
  return autograd::Record("ReduceFromTensorParallelRegion", std::move(sum), {partial},
                          [](const Tensor& dy, const NeedsGrad&) -> Grads { return {dy}; });
}

Variable MarkLayerOutput(const Variable& y, const std::shared_ptr<TensorParallelComm>& comm, int64_t index) {
  if (comm->tracer() == nullptr || !y.requires_grad()) return y;
  return autograd::Record("TraceLayerBackwardStart", y.data(), {y},
                          [comm, index](const Tensor& dy, const NeedsGrad&) -> Grads {
                            if (comm->OpenBackwardPart(index)) {
                              autograd::QueueCallback([comm] { comm->EndBackward(); });
                            }
                            return {dy};
                          });
}

Variable MarkLayerInput(const Variable& x, const std::shared_ptr<TensorParallelComm>& comm) {
  if (comm->tracer() == nullptr || !x.requires_grad()) return x;
  return autograd::Record("TraceLayerBackwardEnd", x.data(), {x}, [comm](const Tensor& dy, const NeedsGrad&) -> Grads {
    comm->CloseBackwardPart();
    return {dy};
  });
}

}  // namespace tinyddp::dist::tensor_parallel
