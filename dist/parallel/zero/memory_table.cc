// The per-rank memory table (dist/parallel/zero/memory_table.h).
#include "dist/parallel/zero/memory_table.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "nn/module.h"
#include "tensor/cuda_allocator.h"
#include "tensor/storage.h"

namespace tinyddp::dist::zero {
namespace {

int64_t StateBytes(const nn::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [name, t] : optimizer.StateTensors()) bytes += t.dim() > 0 ? static_cast<int64_t>(t.nbytes()) : 0;
  return bytes;
}

}  // namespace

RankMemory HeldBy(DistributedDataParallel& ddp, const nn::Optimizer& optimizer,
                  const std::vector<const nn::Optimizer*>& also) {
  RankMemory m;
  const nn::Module& module = ddp.module();
  for (const auto& [name, p] : module.NamedParameters()) {
    m.parameters += static_cast<int64_t>(p.data().nbytes());
    if (!ddp.options().gradient_as_bucket_view && p.grad().defined()) m.gradients += static_cast<int64_t>(p.grad().nbytes());
  }
  for (const auto& [p, copy] : module.ComputeCopies()) m.parameters += static_cast<int64_t>(copy.nbytes());
  for (int b = 0; ddp.options().gradient_as_bucket_view && b < ddp.reducer().num_buckets(); ++b) {
    m.gradients += static_cast<int64_t>(ddp.reducer().BucketBuffer(b).nbytes());
  }
  m.optimizer_state = StateBytes(optimizer);
  for (const nn::Optimizer* more : also) m.optimizer_state += StateBytes(*more);
  return m;
}

RankMemory HeldBy(const ZeroRedundancyOptimizer& zero) {
  const ShardMemory s = zero.Memory();
  return RankMemory{s.parameter_bytes, s.gradient_bytes, s.optimizer_state_bytes, 0};
}

RankMemory HeldBy(const FullyShardedDataParallel& fsdp) {
  const FullyShardedMemory s = fsdp.Memory();
  return RankMemory{s.parameter_bytes + s.compute_copy_bytes, s.gradient_bytes, s.optimizer_state_bytes, 0};
}

int64_t LiveTensorBytes(Device device) {
  return device.is_cuda() ? cuda::GetAllocatorStats(device.index).allocated_bytes : GetHostMemoryStats().live_bytes;
}

int64_t StartPeak(Device device) {
  if (device.is_cpu()) ResetHostPeak();
  return LiveTensorBytes(device);
}

int64_t PeakAbove(Device device, int64_t baseline) {
  const int64_t peak =
      device.is_cuda() ? cuda::GetAllocatorStats(device.index).peak_allocated_bytes : GetHostMemoryStats().peak_bytes;
  return std::max<int64_t>(0, peak - baseline);
}

absl::StatusOr<std::string> GatherMemoryTable(ProcessGroup& pg, const RankMemory& mine, const std::string& title) {
  const Device device = pg.device_index() >= 0 ? Device::CUDA(pg.device_index()) : Device::CPU();
  const Tensor local =
      Tensor::FromVector<int64_t>({mine.parameters, mine.gradients, mine.optimizer_state, mine.peak}, {4}, device);
  Tensor all = Tensor::Empty({4 * pg.size()}, DType::kInt64, device);
  RETURN_IF_ERROR(pg.AllGather(all, local)->Wait());
  if (pg.rank() != 0) return std::string();
  const std::vector<int64_t> v = all.ToVector<int64_t>();
  std::string out = absl::StrCat(title, "\n");
  absl::StrAppendFormat(&out, "  %4s %14s %14s %16s %14s\n", "rank", "parameters", "gradients", "optimizer state",
                        "peak");
  for (int r = 0; r < pg.size(); ++r) {
    absl::StrAppendFormat(&out, "  %4d %14d %14d %16d %14d\n", r, v[4 * r], v[4 * r + 1], v[4 * r + 2], v[4 * r + 3]);
  }
  return out;
}

}  // namespace tinyddp::dist::zero
