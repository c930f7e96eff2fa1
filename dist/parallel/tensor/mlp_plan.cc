// TensorParallelPlan (dist/parallel/tensor/mlp_plan.h): the pairing rule, its refusals, and the table.
#include "dist/parallel/tensor/mlp_plan.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/precision.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

constexpr char kWhat[] =
    "TensorParallelMlp takes an MLP as nn::MLP builds it: Sequential(Linear, activation, Linear, ..., Linear) "
    "with one nn::ReLU or nn::GELU between each two Linear layers";

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

bool IsElementwiseActivation(const nn::Module& m) {
  return dynamic_cast<const nn::ReLU*>(&m) != nullptr || dynamic_cast<const nn::GELU*>(&m) != nullptr;
}

// A column layer's weight and bias are cut by rows (its output features); a row layer's weight by columns (its
// input features), its bias whole; a replicated layer's both whole.
Split WeightSplit(LayerRole role) {
  if (role == LayerRole::kColumn) return Split::kRows;
  return role == LayerRole::kRow ? Split::kColumns : Split::kReplicated;
}
Split BiasSplit(LayerRole role) { return role == LayerRole::kColumn ? Split::kRows : Split::kReplicated; }

int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// "[4, 13] [3, 13]", or "[4, 13] x 2" when every rank's is the same.
std::string ShardsOf(const TensorParallelPlan& plan, const PlannedParam& p) {
  std::vector<std::string> shapes;
  for (int r = 0; r < plan.tp; ++r)
    shapes.push_back(ShapeToString(ShardShape(p.full_shape, p.split, plan.RangeOf(p, r))));
  bool same = true;
  for (const std::string& s : shapes) same = same && s == shapes[0];
  return same ? absl::StrCat(shapes[0], " x ", plan.tp) : absl::StrJoin(shapes, " ");
}

// What a layer's weight or bias is on the tp ranks, for the table.
std::string Held(const TensorParallelPlan& plan, const PlannedParam& p, LayerRole role) {
  if (p.split != Split::kReplicated) return ShardsOf(plan, p);
  if (role == LayerRole::kRow) return absl::StrCat(ShapeToString(p.full_shape), " whole, added after the sum");
  return absl::StrCat(ShapeToString(p.full_shape), " whole on every rank");
}

}  // namespace

const char* RoleName(LayerRole role) {
  switch (role) {
    case LayerRole::kColumn:
      return "column";
    case LayerRole::kRow:
      return "row";
    case LayerRole::kReplicated:
      break;
  }
  return "replicated";
}

absl::StatusOr<TensorParallelPlan> TensorParallelPlan::Make(const nn::Sequential& full, int tp) {
  if (tp < 1) return absl::InvalidArgumentError(absl::StrCat("tensor parallelism needs a tp size >= 1, got ", tp));
  TensorParallelPlan plan;
  plan.tp = tp;
  plan.activation_dtype = nn::ComputeDType(full.precision());
  const auto& children = full.Children();
  if (children.empty() || children.size() % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "; this one has ", children.size(),
                                                   " children, so it does not begin and end with a Linear layer"));
  }
  for (size_t c = 0; c < children.size(); ++c) {
    const auto& [name, child] = children[c];
    if (c % 2 == 1) {
      if (!IsElementwiseActivation(*child)) {
        return absl::InvalidArgumentError(absl::StrCat(kWhat, "; child ", name, " is ", FirstLine(child->ToString()),
                                                       " where an activation belongs"));
      }
      continue;
    }
    const auto* linear = dynamic_cast<const nn::Linear*>(child.get());
    if (linear == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhat, "; child ", name, " is ", FirstLine(child->ToString()), " where a Linear layer belongs"));
    }
    if (!plan.linears.empty() && plan.linears.back().out != linear->in_features()) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "; layer ", name, " takes ", linear->in_features(),
                                                     " features but the layer before it gives ",
                                                     plan.linears.back().out));
    }
    PlannedLinear l;
    l.child = c;
    l.name = name;
    l.in = linear->in_features();
    l.out = linear->out_features();
    l.bias = linear->bias().defined();
    plan.linears.push_back(std::move(l));
  }
  // Two by two: column, row; an odd one out at the end stays whole.
  for (size_t i = 0; i + 1 < plan.linears.size(); i += 2) {
    PlannedLinear& column = plan.linears[i];
    PlannedLinear& row = plan.linears[i + 1];
    if (column.out < tp) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor parallelism over ", tp, " ranks splits the ", column.out, " hidden features between layer ",
          column.name, " (Linear ", column.in, " -> ", column.out, ") and layer ", row.name, " (Linear ", row.in,
          " -> ", row.out, "), fewer than the ranks: every rank needs at least one; use a tp size of at most ",
          column.out, ", or widen that hidden layer"));
    }
    column.role = LayerRole::kColumn;
    row.role = LayerRole::kRow;
  }
  for (const PlannedLinear& l : plan.linears) {
    plan.params.push_back({absl::StrCat(l.name, ".weight"), Shape{l.out, l.in}, WeightSplit(l.role)});
    if (l.bias) plan.params.push_back({absl::StrCat(l.name, ".bias"), Shape{l.out}, BiasSplit(l.role)});
  }
  // nn::Linear registers weight then bias, so this is the model's own order; say so if it ever is not.
  const auto named = full.NamedParameters();
  bool same = named.size() == plan.params.size();
  for (size_t i = 0; same && i < named.size(); ++i) {
    same = named[i].first == plan.params[i].name && named[i].second.shape() == plan.params[i].full_shape;
  }
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat,
                                                   "; its parameters are not its Linear layers' weight and "
                                                   "bias in order (a subclass of nn::Linear with more?)"));
  }
  plan.parameter_dtype = named.front().second.dtype();
  return plan;
}

ShardRange TensorParallelPlan::RangeOf(const PlannedParam& param, int rank) const {
  if (param.split == Split::kReplicated) return ShardRange{};
  return ShardOf(SplitLength(param.full_shape, param.split), tp, rank);
}

int64_t TensorParallelPlan::LocalParameters(int rank) const {
  int64_t n = 0;
  for (const PlannedParam& p : params) {
    n += p.split == Split::kReplicated ? Numel(p.full_shape)
                                       : Numel(ShardShape(p.full_shape, p.split, RangeOf(p, rank)));
  }
  return n;
}

int64_t TensorParallelPlan::TotalParameters() const {
  int64_t n = 0;
  for (const PlannedParam& p : params) n += Numel(p.full_shape);
  return n;
}

std::string TensorParallelPlan::Describe(int64_t batch_size) const {
  int pairs = 0, replicated = 0;
  for (const PlannedLinear& l : linears) {
    pairs += l.role == LayerRole::kColumn;
    replicated += l.role == LayerRole::kReplicated;
  }
  std::string out = absl::StrFormat(
      "tensor parallelism over %d rank(s): %d Linear layer(s), %d column -> row pair(s), %d replicated\n"
      "  %-6s %-12s %-11s %-34s %s\n",
      tp, linears.size(), pairs, replicated, "layer", "Linear", "role", "weight on tp rank 0, 1, ...", "bias");
  size_t p = 0;
  for (const PlannedLinear& l : linears) {
    const std::string weight = Held(*this, params[p++], l.role);
    const std::string bias = l.bias ? Held(*this, params[p++], l.role) : "none";
    absl::StrAppendFormat(&out, "  %-6s %-12s %-11s %-34s %s\n", l.name, absl::StrCat(l.in, " -> ", l.out),
                          RoleName(l.role), weight, bias);
  }
  if (batch_size > 0 && pairs > 0) {
    const int64_t bytes = static_cast<int64_t>(DTypeSize(activation_dtype));
    absl::StrAppendFormat(&out,
                          "all_reduce (SUM over the tp group) per step, batch %d, %s activations; a ring sends "
                          "2(N-1)/N of each per rank:\n",
                          batch_size, DTypeName(activation_dtype));
    for (size_t i = 0; i + 1 < linears.size(); i += 2) {
      const PlannedLinear &column = linears[i], &row = linears[i + 1];
      const std::string backward =
          i == 0 ? absl::StrCat("none (layer ", column.name, "'s input is the data, which needs no gradient)")
                 : absl::StrFormat("layer %s's input gradient [%d, %d], %d bytes", column.name, batch_size, column.in,
                                   batch_size * column.in * bytes);
      absl::StrAppendFormat(&out, "  pair %s -> %s: forward: layer %s's output [%d, %d], %d bytes; backward: %s\n",
                            column.name, row.name, row.name, batch_size, row.out, batch_size * row.out * bytes,
                            backward);
    }
  }
  absl::StrAppendFormat(&out,
                        "parameters: tp rank 0 holds %d of %d; DDP over the data-parallel group all-reduces the "
                        "%s gradients of those, %d bytes a step\n",
                        LocalParameters(0), TotalParameters(), DTypeName(parameter_dtype),
                        LocalParameters(0) * static_cast<int64_t>(DTypeSize(parameter_dtype)));
  return out;
}

}  // namespace tinyddp::dist::tensor_parallel
