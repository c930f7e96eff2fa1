// The stage plan and a stage's module (stage_plan.h).
#include "dist/parallel/pipeline/stage_plan.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nn/activation.h"
#include "nn/linear.h"

namespace tinyddp::dist::pipeline {
namespace {

struct LinearAt {
  size_t child;
  int64_t in, out;
};

// The Linears of `full`, checked to be an MLP: Linear (activation Linear)*.
absl::StatusOr<std::vector<LinearAt>> Linears(const nn::Sequential& full) {
  std::vector<LinearAt> linears;
  const auto& children = full.Children();
  for (size_t i = 0; i < children.size(); ++i) {
    const nn::Module* m = children[i].second.get();
    const bool want_linear = i % 2 == 0;
    if (const auto* linear = dynamic_cast<const nn::Linear*>(m); linear != nullptr && want_linear) {
      linears.push_back({i, linear->in_features(), linear->out_features()});
    } else if (want_linear || (dynamic_cast<const nn::ReLU*>(m) == nullptr && dynamic_cast<const nn::GELU*>(m) == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--pp: the pipeline cuts an MLP as nn::MLP builds it (Linear, activation, Linear, ...); child ", i, " is ",
          m->ToString()));
    }
  }
  if (linears.empty() || children.size() % 2 == 0) {
    return absl::InvalidArgumentError("--pp: the model must start and end with a Linear layer");
  }
  return linears;
}

// Cut points minimising the most expensive stage: best[s][j] = the smallest maximum cost of the first j
// Linears in s stages. O(S * L^2) for L Linears, a few microseconds for any MLP here.
std::vector<int> BalancedCuts(const std::vector<int64_t>& cost, int stages) {
  const int n = static_cast<int>(cost.size());
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int j = s; j <= n; ++j) {
      for (int i = s - 1; i < j; ++i) {  // the last stage holds Linears [i, j)
        if (best[s - 1][i] == kInf) continue;
        const int64_t worst = std::max(best[s - 1][i], prefix[j] - prefix[i]);
        if (worst < best[s][j]) {
          best[s][j] = worst;
          cut[s][j] = i;
        }
      }
    }
  }
  std::vector<int> starts(stages);
  for (int s = stages, j = n; s >= 1; --s) {
    starts[s - 1] = cut[s][j];
    j = cut[s][j];
  }
  return starts;  // the first Linear of each stage
}

}  // namespace

absl::StatusOr<StagePlan> StagePlan::Make(const nn::Sequential& full, int stages, bool equal) {
  auto found = Linears(full);
  if (!found.ok()) return found.status();
  const std::vector<LinearAt>& linears = *found;
  const int n = static_cast<int>(linears.size());
  if (stages < 1 || stages > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pp: %d pipeline stages (--pp x --pp_virtual_stages) for an MLP of %d Linear layers: each stage needs at "
        "least one; use at most %d stages, or more layers (--hidden=W,W,...: %d hidden widths give %d Linears)",
        stages, n, n, stages - 1, stages));
  }
  if (equal && n % stages != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pp_schedule=interleaved: the MLP's %d Linear layers do not split evenly into %d stages (--pp x "
        "--pp_virtual_stages): give --hidden %d widths for %d Linears, or change --pp or --pp_virtual_stages",
        n, stages, stages * ((n + stages - 1) / stages) - 1, stages * ((n + stages - 1) / stages)));
  }
  std::vector<int64_t> cost;
  for (const LinearAt& l : linears) cost.push_back(l.in * l.out);
  std::vector<int> starts;
  if (equal) {
    for (int s = 0; s < stages; ++s) starts.push_back(s * (n / stages));
  } else {
    starts = BalancedCuts(cost, stages);
  }
  StagePlan plan;
  for (int s = 0; s < stages; ++s) {
    const int first = starts[s], end = s + 1 < stages ? starts[s + 1] : n;
    StageLayers layers;
    layers.first_child = linears[first].child;
    layers.end_child = end < n ? linears[end].child : full.Children().size();
    layers.in_features = linears[first].in;
    layers.out_features = linears[end - 1].out;
    layers.linears = end - first;
    for (int i = first; i < end; ++i) layers.cost += cost[i];
    plan.stages.push_back(layers);
  }
  return plan;
}

std::string StagePlan::Describe(int ranks) const {
  int64_t total = 0;
  for (const StageLayers& s : stages) total += s.cost;
  std::string out = absl::StrFormat("pipeline stages (%d over %d rank(s); a stage's cost: its Linears' in*out):\n",
                                    stages.size(), ranks);
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageLayers& l = stages[s];
    absl::StrAppend(&out, absl::StrFormat("  stage %d on rank %d: children %d..%d, %d Linear(s), %d -> %d, "
                                          "cost %.1f%%\n",
                                          s, s % ranks, l.first_child, l.end_child - 1, l.linears, l.in_features,
                                          l.out_features, 100.0 * l.cost / std::max<int64_t>(1, total)));
  }
  return out;
}

namespace {
// A Sequential whose children keep the names they had in the whole model.
class NamedSequential : public nn::Sequential {
 public:
  void Add(const std::string& name, std::shared_ptr<nn::Module> module) { RegisterModule(name, std::move(module)); }
};
}  // namespace

std::shared_ptr<nn::Sequential> StageSequential(const nn::Sequential& full, const StageLayers& layers,
                                                std::shared_ptr<nn::Module>* trailing) {
  auto seq = std::make_shared<NamedSequential>();
  size_t end = layers.end_child;
  *trailing = nullptr;
  if (dynamic_cast<const nn::Linear*>(full.Children()[end - 1].second.get()) == nullptr) {
    *trailing = full.Children()[--end].second;
  }
  for (size_t i = layers.first_child; i < end; ++i) seq->Add(full.Children()[i].first, full.Children()[i].second);
  return seq;
}

PipelineStage::PipelineStage(std::shared_ptr<nn::Module> inner, std::shared_ptr<nn::Module> trailing,
                             const StageLayers& layers)
    : layers_(layers), inner_(std::move(inner)), trailing_(std::move(trailing)) {
  for (const auto& [name, child] : inner_->Children()) RegisterModule(name, child);
}

PipelineStage::PipelineStage(const nn::Sequential& full, const StageLayers& layers) : layers_(layers) {
  for (size_t i = layers.first_child; i < layers.end_child; ++i) {
    RegisterModule(full.Children()[i].first, full.Children()[i].second);
  }
}

// nn::Sequential::Forward's loop, over this stage's children: the same fusion, so the same bits.
autograd::Variable PipelineStage::Forward(const autograd::Variable& x) {
  if (inner_ != nullptr) return trailing_ ? trailing_->Forward(inner_->Forward(x)) : inner_->Forward(x);
  const auto& children = Children();
  autograd::Variable y = x;
  for (size_t i = 0; i < children.size(); ++i) {
    auto* linear = dynamic_cast<nn::Linear*>(children[i].second.get());
    if (linear != nullptr && i + 1 < children.size() && dynamic_cast<nn::ReLU*>(children[i + 1].second.get())) {
      y = linear->ForwardRelu(y);
      ++i;
      continue;
    }
    y = children[i].second->Forward(y);
  }
  return y;
}

std::string PipelineStage::ToString() const {
  std::string s = "PipelineStage(\n";
  for (const auto& [name, child] : Children()) absl::StrAppend(&s, "  (", name, "): ", child->ToString(), "\n");
  return s + ")";
}

}  // namespace tinyddp::dist::pipeline
