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
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/init.h"
#include "dist/spawn.h"
#include "tensor/cuda_device.h"
#include "tensor/tensor.h"

namespace tinyddp {
namespace {

// "[1, 2, 3]": whole numbers without decimals.
std::string Format(const Tensor& t) {
  std::vector<std::string> parts;
  for (float v : t.ToVector<float>()) {
    parts.push_back(v == std::floor(v) ? absl::StrCat(static_cast<long long>(v)) : absl::StrCat(v));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

void PrintInRankOrder(dist::ProcessGroup& pg, const std::string& line) {
  for (int r = 0; r < pg.size(); ++r) {
    if (r == pg.rank()) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    (void)pg.Barrier()->Wait();
  }
}

void Heading(dist::ProcessGroup& pg, const std::string& text) {
  if (pg.rank() == 0) std::printf("\n== %s ==\n", text.c_str());
}

// Stops the demo with the collective's error (every rank reaches the same check).
bool Ok(const absl::Status& s, int rank) {
  if (!s.ok()) std::fprintf(stderr, "collectives_demo: rank %d: %s\n", rank, std::string(s.message()).c_str());
  return s.ok();
}

int Run(dist::Backend backend) {
  dist::InitOptions options;
  options.backend = backend;
  auto pg_or = dist::InitProcessGroup(options);
  if (!pg_or.ok()) {
    std::fprintf(stderr, "collectives_demo: %s\n", std::string(pg_or.status().message()).c_str());
    return 1;
  }
  dist::ProcessGroup& pg = **pg_or;
  const int rank = pg.rank();
  const int n = pg.size();
  const Device device = std::string(pg.backend_name()) == "nccl" ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();
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

int main(int argc, char** argv) {
  tinyddp::dist::Backend backend = tinyddp::dist::Backend::kAuto;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto parsed = tinyddp::dist::ParseBackend(arg.rfind("--backend=", 0) == 0 ? arg.substr(10) : arg);
    if (!parsed.ok()) {
      std::fprintf(stderr, "collectives_demo: %s (usage: collectives_demo [--backend=auto|nccl|gloo])\n",
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    backend = *parsed;
  }
  if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv); !s.ok()) {
    std::fprintf(stderr, "collectives_demo: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return tinyddp::Run(backend);
}
