// collectives_demo: the four collectives data-parallel training is built from, each shown on small tensors
// before and after, rank by rank.
//
//   ./bazelw run //examples:collectives_demo                   # one rank per GPU (NCCL), or 2 CPU ranks (Gloo)
//   ./bazelw run //examples:collectives_demo -- --backend=gloo
//   launch --nproc_per_node=3 collectives_demo
//
//   Broadcast      rank 0's tensor is copied to every rank (how DDP starts every replica from the same weights)
//   AllGather      every rank's tensor, concatenated in rank order, lands on every rank
//   ReduceScatter  the sum of every rank's tensor, cut into one block per rank (the first half of ring all-reduce)
//   AllReduce      the sum lands on every rank (how DDP averages gradients)
// Lines are printed in rank order: each rank prints, then all meet at a barrier.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/observe/debug_check/debug_check.h"  // AttachDebugCheck: TINYDDP_DISTRIBUTED_DEBUG=DETAIL
#include "examples/internal/demo_support.h"
#include "tensor/tensor.h"

namespace tinyddp {
namespace {

using examples::Format;
using examples::PrintInRankOrder;

void Heading(dist::ProcessGroup& pg, const std::string& text) {
  if (pg.rank() == 0) std::printf("\n== %s ==\n", text.c_str());
}

// Stops the demo with the collective's error (every rank reaches the same check).
bool Ok(const absl::Status& s, int rank) {
  if (!s.ok()) std::fprintf(stderr, "collectives_demo: rank %d: %s\n", rank, std::string(s.message()).c_str());
  return s.ok();
}

int Run(dist::ProcessGroup& pg, Device device) {
  dist::AttachDebugCheck(pg);  // with TINYDDP_DISTRIBUTED_DEBUG=DETAIL the ranks compare each call first
  const int rank = pg.rank();
  const int n = pg.size();
  auto vec = [&](std::vector<float> values) {
    const int64_t count = static_cast<int64_t>(values.size());
    return Tensor::FromVector(values, {count}, device);
  };
  if (rank == 0) std::printf("%d ranks, backend %s, tensors on %s\n", n, pg.backend_name(), device.ToString().c_str());

  // Broadcast: rank 0 holds [7, 8, 9], the others zeros.
  Heading(pg, "Broadcast from rank 0");
  Tensor b = rank == 0 ? vec({7, 8, 9}) : vec({0, 0, 0});
  PrintInRankOrder(pg, absl::StrCat("Before broadcast: Rank ", rank, ": ", Format(b)));
  if (!Ok(pg.Broadcast(b, /*root=*/0)->Wait(), rank)) return 1;
  PrintInRankOrder(pg, absl::StrCat("After broadcast: Rank ", rank, ": ", Format(b)));

  // AllGather: rank r contributes [r, r]; everyone receives [0, 0, 1, 1, ...].
  Heading(pg, "AllGather");
  Tensor mine = vec({static_cast<float>(rank), static_cast<float>(rank)});
  Tensor gathered = Tensor::Zeros({2 * n}, DType::kFloat32, device);
  PrintInRankOrder(pg, absl::StrCat("Before all_gather: Rank ", rank, ": ", Format(mine)));
  if (!Ok(pg.AllGather(gathered, mine)->Wait(), rank)) return 1;
  PrintInRankOrder(pg, absl::StrCat("After all_gather: Rank ", rank, ": ", Format(gathered)));

  // ReduceScatter: every rank holds [1, 2, ..., 2n] * (rank + 1); rank r receives block r of the sum.
  Heading(pg, "ReduceScatter (SUM)");
  std::vector<float> values(2 * n);
  for (int i = 0; i < 2 * n; ++i) values[i] = (i + 1.0f) * (rank + 1);
  Tensor full = vec(values);
  Tensor block = Tensor::Zeros({2}, DType::kFloat32, device);
  PrintInRankOrder(pg, absl::StrCat("Before reduce_scatter: Rank ", rank, ": ", Format(full)));
  if (!Ok(pg.ReduceScatter(block, full, dist::ReduceOp::kSum)->Wait(), rank)) return 1;
  PrintInRankOrder(pg, absl::StrCat("After reduce_scatter: Rank ", rank, ": ", Format(block)));

  // AllReduce: rank r holds [r + 1, 10 * (r + 1)]; everyone receives the sums.
  Heading(pg, "AllReduce (SUM)");
  Tensor a = vec({rank + 1.0f, 10.0f * (rank + 1)});
  PrintInRankOrder(pg, absl::StrCat("Before all_reduce: Rank ", rank, ": ", Format(a)));
  if (!Ok(pg.AllReduce(a, dist::ReduceOp::kSum)->Wait(), rank)) return 1;
  PrintInRankOrder(pg, absl::StrCat("After all_reduce: Rank ", rank, ": ", Format(a)));
  return 0;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) { return tinyddp::examples::DemoMain("collectives_demo", argc, argv, tinyddp::Run); }
