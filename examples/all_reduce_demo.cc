// all_reduce_demo: the first program of every NCCL tutorial, in C++. Each rank holds [rank+1] * 3, all
// ranks sum their tensors with one AllReduce, and every rank ends with the same [N(N+1)/2] * 3.
//
//   ./bazelw run //examples:all_reduce_demo                   # one rank per GPU (NCCL), or 2 CPU ranks (Gloo)
//   ./bazelw run //examples:all_reduce_demo -- --backend=gloo # Gloo even where there are GPUs
//   launch --nproc_per_node=4 all_reduce_demo                 # under the launcher (or torchrun, srun, mpirun)
//
// With two ranks it prints (ranks in order; the barriers between the lines see to that):
//   Before reduce: Rank 0: [1, 1, 1]
//   Before reduce: Rank 1: [2, 2, 2]
//   After reduce: Rank 0: [3, 3, 3]
//   After reduce: Rank 1: [3, 3, 3]
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "examples/internal/demo_support.h"
#include "tensor/tensor.h"

namespace tinyddp {
namespace {

using examples::Format;
using examples::PrintInRankOrder;

int Run(dist::ProcessGroup& pg, Device device) {
  const int rank = pg.rank();
  Tensor tensor = Tensor::Full({3}, rank + 1.0, DType::kFloat32, device);
  PrintInRankOrder(pg, absl::StrCat("Before reduce: Rank ", rank, ": ", Format(tensor)));
  if (absl::Status s = pg.AllReduce(tensor, dist::ReduceOp::kSum)->Wait(); !s.ok()) {
    std::fprintf(stderr, "all_reduce_demo: rank %d: %s\n", rank, std::string(s.message()).c_str());
    return 1;
  }
  PrintInRankOrder(pg, absl::StrCat("After reduce: Rank ", rank, ": ", Format(tensor)));
  return 0;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) { return tinyddp::examples::DemoMain("all_reduce_demo", argc, argv, tinyddp::Run); }
