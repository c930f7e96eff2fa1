// The measured bubble (bubble.h).
#include "dist/parallel/pipeline/bubble.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace tinyddp::dist::pipeline {

absl::StatusOr<std::vector<std::vector<ComputeRecord>>> GatherComputes(ProcessGroup* group, const StepRecord& step) {
  if (group == nullptr || group->size() == 1) return std::vector<std::vector<ComputeRecord>>{step.computes};
  constexpr int kFields = 5;  // kind, stage, microbatch, start, end
  std::vector<int64_t> mine;
  for (const ComputeRecord& c : step.computes) {
    mine.insert(mine.end(), {static_cast<int64_t>(c.action.kind), c.action.stage, c.action.microbatch, c.start_us,
                             c.end_us});
  }
  const int64_t n = static_cast<int64_t>(mine.size());
  Tensor local = Tensor::FromVector<int64_t>(mine, {n}, Device::CPU());
  Tensor all = Tensor::Empty({n * group->size()}, DType::kInt64, Device::CPU());
  if (group->device_index() >= 0) {  // NCCL carries device tensors only
    local = local.To(Device::CUDA(group->device_index()));
    all = all.To(Device::CUDA(group->device_index()));
  }
  RETURN_IF_ERROR(group->AllGather(all, local)->Wait());
  const std::vector<int64_t> values = all.To(Device::CPU()).ToVector<int64_t>();
  std::vector<std::vector<ComputeRecord>> out(group->size());
  for (int r = 0; r < group->size(); ++r) {
    for (int64_t i = r * n; i < (r + 1) * n; i += kFields) {
      out[r].push_back({{static_cast<ActionKind>(values[i]), static_cast<int>(values[i + 1]),
                         static_cast<int>(values[i + 2])},
                        values[i + 3], values[i + 4]});
    }
  }
  return out;
}

StepIdle IdleOf(const std::vector<std::vector<ComputeRecord>>& computes) {
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  for (const auto& rank : computes) {
    for (const ComputeRecord& c : rank) {
      first = std::min(first, c.start_us);
      last = std::max(last, c.end_us);
    }
  }
  StepIdle idle;
  idle.window_us = last > first ? static_cast<double>(last - first) : 1.0;
  for (const auto& rank : computes) {
    double busy = 0;
    for (const ComputeRecord& c : rank) busy += static_cast<double>(c.end_us - c.start_us);
    idle.busy_us.push_back(busy);
    idle.idle.push_back(1.0 - busy / idle.window_us);
    idle.mean_idle += idle.idle.back() / static_cast<double>(computes.size());
  }
  return idle;
}

std::string ComputesAsChromeTrace(const std::vector<std::vector<ComputeRecord>>& computes) {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& rank : computes) {
    for (const ComputeRecord& c : rank) first = std::min(first, c.start_us);
  }
  std::string events;
  for (size_t r = 0; r < computes.size(); ++r) {
    absl::StrAppend(&events, events.empty() ? "" : ",\n",
                    absl::StrFormat(R"({"ph":"M","name":"process_name","pid":%d,"args":{"name":"rank %d"}})", r, r));
    for (const ComputeRecord& c : computes[r]) {
      const char* name = c.action.kind == ActionKind::kForward ? "F" : c.action.kind == ActionKind::kBackward ? "B" : "W";
      absl::StrAppend(&events, ",\n",
                      absl::StrFormat(R"({"ph":"X","name":"%s%d","cat":"%s","pid":%d,"tid":1,"ts":%d,"dur":%d,)"
                                      R"("args":{"stage":%d,"microbatch":%d}})",
                                      name, c.action.microbatch, name, r, c.start_us - first, c.end_us - c.start_us,
                                      c.action.stage, c.action.microbatch));
    }
  }
  return absl::StrCat("{\"traceEvents\":[\n", events, "\n]}\n");
}

}  // namespace tinyddp::dist::pipeline
