// f and g, the conjugate ops (dist/parallel/tensor/region_ops.h): each backward beside its forward, as the
// ops of autograd/functions.h are written.
#include "dist/parallel/tensor/region_ops.h"

#include <utility>

#include "autograd/node.h"

namespace tinyddp::dist::tensor_parallel {

using autograd::Grads;
using autograd::NeedsGrad;
using autograd::Variable;

Variable CopyToTensorParallelRegion(const Variable& x, std::shared_ptr<TensorParallelComm> comm, std::string layer) {
  return autograd::Record(
      "CopyToTensorParallelRegion", x.data(), {x},
      [comm = std::move(comm), layer = std::move(layer)](const Tensor& dy, const NeedsGrad&) -> Grads {
        Tensor sum = dy.Clone();  // dy may be held elsewhere by the engine: sum a copy
        comm->AllReduceSum(sum, layer, "input gradient (backward of f)");
        return {sum};
      });
}

Variable ReduceFromTensorParallelRegion(const Variable& partial, std::shared_ptr<TensorParallelComm> comm,
                                        std::string layer) {
  Tensor sum = partial.data().Clone();  // the input stays this rank's partial sum
  comm->AllReduceSum(sum, layer, "output (forward of g)");
  return autograd::Record("ReduceFromTensorParallelRegion", std::move(sum), {partial},
                          [](const Tensor& dy, const NeedsGrad&) -> Grads { return {dy}; });
}

}  // namespace tinyddp::dist::tensor_parallel
