// cluster_probe: one rank of a job, started by an engine (srun, mpirun, a pod's variables, launch) the way a
// training program is. It reads its place in the job (dist/engines/engines.h, which translates every engine into env://), joins the group with backend
// auto (dist/init.h), proves the group works with one all_reduce, and prints one line:
//
//   probe rank=1 world=2 local_rank=0 local_world=1 node=1 master=127.0.0.1:29500 source=env:// backend=gloo
//         device=cpu sum=3
//
// (source: the engine's name, spaces as underscores, "Open_MPI"; sum: every rank contributes rank + 1, so
// world * (world + 1) / 2.) Errors go to stderr, exit 2 for the
// environment, 3 for the group.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "dist/init.h"
#include "dist/engines/engines.h"
#include "tensor/cuda_device.h"
#include "tensor/tensor.h"

int main() {
  using namespace tinyddp;
  absl::StatusOr<dist::WorkerEnv> env = dist::ReadEngineEnv(dist::CurrentEnvironment());
  if (!env.ok()) {
    std::fprintf(stderr, "cluster_probe: %s\n", std::string(env.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::InitProcessGroup(*env, {});
  if (!pg.ok()) {
    std::fprintf(stderr, "cluster_probe: %s\n", std::string(pg.status().message()).c_str());
    return 3;
  }
  const std::string backend = (*pg)->backend_name();
  const Device device = backend == "nccl" ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();
  Tensor value = Tensor::Full({1}, env->rank + 1.0, DType::kFloat32, device);
  if (absl::Status s = (*pg)->AllReduce(value, dist::ReduceOp::kSum)->Wait(); !s.ok()) {
    std::fprintf(stderr, "cluster_probe: all_reduce: %s\n", std::string(s.message()).c_str());
    return 3;
  }
  const std::string line = absl::StrCat(
      "probe rank=", env->rank, " world=", env->world_size, " local_rank=", env->local_rank,
      " local_world=", env->local_world_size, " node=", env->group_rank, " master=", env->master_addr, ":",
      env->master_port, " source=", absl::StrReplaceAll(env->source, {{" ", "_"}}),
      " backend=", backend,
      " device=", device.ToString(), " sum=", value.To(Device::CPU()).Item(), "\n");
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
  // Rank 0 may host the store: it stays until every rank has used it.
  (*pg)->Barrier()->Wait().IgnoreError();
  return 0;
}
