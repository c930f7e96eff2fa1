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

// "[3, 3, 3]": whole numbers without decimals, like Python printing a list of ints.
std::string Format(const Tensor& t) {
  std::vector<std::string> parts;
  for (float v : t.ToVector<float>()) {
    parts.push_back(v == std::floor(v) ? absl::StrCat(static_cast<long long>(v)) : absl::StrCat(v));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// Prints one line per rank, in rank order: rank r prints, then everyone meets at a barrier.
void PrintInRankOrder(dist::ProcessGroup& pg, const std::string& line) {
  for (int r = 0; r < pg.size(); ++r) {
    if (r == pg.rank()) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    (void)pg.Barrier()->Wait();
  }
}

int Run(dist::Backend backend) {
  dist::InitOptions options;
  options.backend = backend;
  auto pg_or = dist::InitProcessGroup(options);
  if (!pg_or.ok()) {
    std::fprintf(stderr, "all_reduce_demo: %s\n", std::string(pg_or.status().message()).c_str());
    return 1;
  }
  dist::ProcessGroup& pg = **pg_or;
  const int rank = pg.rank();
  // NCCL reduces GPU memory: InitProcessGroup bound this process to cuda:LOCAL_RANK.
  const Device device = std::string(pg.backend_name()) == "nccl" ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();

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

int main(int argc, char** argv) {
  tinyddp::dist::Backend backend = tinyddp::dist::Backend::kAuto;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto parsed = tinyddp::dist::ParseBackend(arg.rfind("--backend=", 0) == 0 ? arg.substr(10) : arg);
    if (!parsed.ok()) {
      std::fprintf(stderr, "all_reduce_demo: %s (usage: all_reduce_demo [--backend=auto|nccl|gloo])\n",
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    backend = *parsed;
  }
  // Run directly, this process becomes a small launcher for its own workers; as a worker it continues.
  if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv); !s.ok()) {
    std::fprintf(stderr, "all_reduce_demo: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return tinyddp::Run(backend);
}
