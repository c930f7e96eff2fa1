// TensorParallelMlp (dist/parallel/tensor/tensor_parallel_mlp.h): building the shards, the forward, and the
// model's way back to one process's form (its optimizer state: tensor_parallel_state.cc).
#include "dist/parallel/tensor/tensor_parallel_mlp.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/tensor/column_parallel_linear.h"
#include "dist/parallel/tensor/gather_shards.h"
#include "dist/parallel/tensor/region_ops.h"
#include "dist/parallel/tensor/row_parallel_linear.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "tensor/ops.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

using autograd::Variable;

absl::Status Annotate(const absl::Status& status, const std::string& what) {
  return absl::Status(status.code(), absl::StrCat("TensorParallelMlp: ", what, ": ", status.message()));
}

// Whether `group` can all-reduce the tensors of a model on `device`.
absl::Status CheckGroupCarries(const ProcessGroup& group, Device device) {
  const std::string backend = group.backend_name();
  if (device.is_cuda() && backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorParallelMlp: the model is on ", device.ToString(), " but the tp group is ", backend,
                     ", which carries CPU tensors; build the mesh over an NCCL world, or build the model on the CPU"));
  }
  if (device.is_cuda() && group.device_index() != device.index) {
    return absl::InvalidArgumentError(absl::StrCat("TensorParallelMlp: the model is on ", device.ToString(),
                                                   " but the tp group's NCCL communicator is on cuda:",
                                                   group.device_index(), "; build the model on this rank's GPU"));
  }
  if (device.is_cpu() && backend == "nccl") {
    return absl::InvalidArgumentError(
        "TensorParallelMlp: the model is on the CPU but the tp group is nccl, which carries CUDA tensors; build "
        "the model on this rank's GPU (MlpOptions::device), or the mesh over a Gloo world");
  }
  return absl::OkStatus();
}

// This rank's module for layer `l`, the `index`-th Linear, cut from the whole layer's weight `w` and bias `b`
// (undefined: none).
std::shared_ptr<nn::Module> LayerOf(const PlannedLinear& l, int64_t index, const Tensor& w, const Tensor& b,
                                    const std::shared_ptr<TensorParallelComm>& comm) {
  const int tp = comm->size(), rank = comm->rank();
  switch (l.role) {
    case LayerRole::kColumn:
      return std::make_shared<ColumnParallelLinear>(w, b, ShardOf(l.out, tp, rank), comm, l.name, index);
    case LayerRole::kRow:
      return std::make_shared<RowParallelLinear>(w, b, ShardOf(l.in, tp, rank), comm, l.name, index);
    case LayerRole::kReplicated:
      break;
  }
  nn::LinearOptions options;  // the whole layer: a plain nn::Linear holding tp rank 0's values
  options.bias = l.bias;
  options.dtype = w.dtype();
  options.device = w.device();
  auto whole = std::make_shared<nn::Linear>(l.in, l.out, options);
  Tensor into_w = whole->weight().data();
  ops::CopyInto(into_w, w);
  if (l.bias) {
    Tensor into_b = whole->bias().data();
    ops::CopyInto(into_b, b);
  }
  return whole;
}

}  // namespace

TensorParallelMlp::TensorParallelMlp(TensorParallelPlan plan, std::shared_ptr<TensorParallelComm> comm)
    : plan_(std::move(plan)), comm_(std::move(comm)) {}

absl::StatusOr<std::unique_ptr<TensorParallelMlp>> TensorParallelMlp::Create(const nn::Sequential& full,
                                                                             std::shared_ptr<ProcessGroup> tp_group) {
  if (tp_group == nullptr) {
    return absl::InvalidArgumentError(
        "TensorParallelMlp: the tp group is null; pass DeviceMesh::tp_group, the group of this rank's row");
  }
  ASSIGN_OR_RETURN(TensorParallelPlan plan, TensorParallelPlan::Make(full, tp_group->size()));
  const auto named = full.NamedParameters();
  RETURN_IF_ERROR(CheckGroupCarries(*tp_group, named.front().second.device()));
  if (absl::Status s = VerifyParametersMatchAcrossRanks(*tp_group, named); !s.ok()) {
    return Annotate(s, "the tp ranks must build the same model (the same dims, e.g. the same --hidden)");
  }
  auto comm = std::make_shared<TensorParallelComm>(tp_group);
  std::unique_ptr<TensorParallelMlp> model(new TensorParallelMlp(plan, comm));
  const auto& children = full.Children();
  size_t next = 0;
  for (size_t c = 0; c < children.size(); ++c) {
    const auto& [name, child] = children[c];
    if (c % 2 == 1) {  // an activation (the plan checked): a fresh one of the same kind
      std::shared_ptr<nn::Module> act = std::make_shared<nn::ReLU>();
      if (dynamic_cast<const nn::GELU*>(child.get()) != nullptr) act = std::make_shared<nn::GELU>();
      model->RegisterModule(name, act);
      continue;
    }
    const auto& linear = static_cast<const nn::Linear&>(*child);
    const int64_t index = static_cast<int64_t>(next);
    const PlannedLinear& l = plan.linears[next++];
    // The whole layer as tp rank 0 holds it (one model on every rank, as DDP starts), cut right away.
    Tensor w = linear.weight().data().Clone();
    Tensor b = l.bias ? linear.bias().data().Clone() : Tensor();
    for (Tensor* t : {&w, &b}) {
      if (!t->defined()) continue;
      if (absl::Status s = tp_group->Broadcast(*t, 0)->Wait(); !s.ok()) {
        return Annotate(s, absl::StrCat("broadcasting tp rank 0's layer ", name));
      }
    }
    model->RegisterModule(name, LayerOf(l, index, w, b, comm));
  }
  if (full.precision() != nn::Precision::kFloat32) model->SetPrecision(full.precision());
  return model;
}

Variable TensorParallelMlp::Forward(const Variable& x) {
  const auto& children = Children();
  Tracer* const tracer = comm_->tracer();  // tracing: each layer's forward and backward spans (comm.h)
  Variable y = x;
  // Linear k is child 2k, its activation (none after the last) child 2k + 1: the plan's rule (mlp_plan.h).
  for (size_t c = 0; c < children.size(); c += 2) {
    const int64_t index = static_cast<int64_t>(c / 2);
    nn::Module* layer = children[c].second.get();
    nn::Module* act = c + 1 < children.size() ? children[c + 1].second.get() : nullptr;
    // A column-parallel or replicated Linear followed by a ReLU runs as one node, as in nn::Sequential. (A
    // row-parallel layer's ReLU cannot join its GEMM: its bias comes after the all_reduce.)
    const bool relu = act != nullptr && dynamic_cast<nn::ReLU*>(act) != nullptr;
    if (auto* column = dynamic_cast<ColumnParallelLinear*>(layer)) {
      y = relu ? column->ForwardRelu(y) : column->Forward(y);  // f, then its GEMM (its own span)
      if (relu) act = nullptr;
    } else if (auto* whole = dynamic_cast<nn::Linear*>(layer)) {
      const Variable input = MarkLayerInput(y, comm_);
      Tracer::Span span = Tracer::MaybeScope(tracer, "forward layer", index);
      y = relu ? whole->ForwardRelu(input) : whole->Forward(input);
      if (relu) act = nullptr;
    } else {
      y = layer->Forward(y);  // a row-parallel layer: its GEMM, g, its bias (its own spans)
    }
    if (act != nullptr) {  // an activation that did not join the GEMM: the layer's compute too
      Tracer::Span span = Tracer::MaybeScope(tracer, "forward layer", index);
      y = act->Forward(y);
    }
    y = MarkLayerOutput(y, comm_, index);  // tracing: where the layer's backward starts (region_ops.h)
  }
  return y;
}

std::vector<int64_t> TensorParallelMlp::AllReduceBytes(int64_t batch_size) const {
  const int64_t d = static_cast<int64_t>(DTypeSize(plan_.activation_dtype));
  std::vector<int64_t> bytes;
  for (size_t k = 0; k < plan_.linears.size(); ++k) {
    const PlannedLinear& l = plan_.linears[k];
    if (l.role == LayerRole::kRow) {
      bytes.push_back(batch_size * l.out * d);  // g: the pair's output
    } else if (l.role == LayerRole::kColumn && k > 0) {
      bytes.push_back(batch_size * l.in * d);  // f: the pair's input gradient
    } else {
      bytes.push_back(0);  // the first layer's input is the data (no f); a replicated layer has none
    }
  }
  return bytes;
}

std::string TensorParallelMlp::ToString() const {
  std::string out = absl::StrCat("TensorParallelMlp(tp rank ", comm_->rank(), " of ", comm_->size(), ")(\n");
  for (const auto& [name, child] : Children()) absl::StrAppend(&out, "  (", name, "): ", child->ToString(), "\n");
  return out + ")";
}

absl::Status TensorParallelMlp::CheckWhole(const nn::Module& full, const char* what) const {
  const auto theirs = full.NamedParameters();
  const auto mine = NamedParameters();
  if (theirs.size() != plan_.params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("TensorParallelMlp::", what, ": the whole model has ",
                                                   plan_.params.size(), " parameters, the one given ", theirs.size(),
                                                   "; pass an nn::MLP of the same dims"));
  }
  for (size_t k = 0; k < theirs.size(); ++k) {
    const PlannedParam& p = plan_.params[k];
    const Tensor& t = theirs[k].second.data();
    if (theirs[k].first != p.name || t.shape() != p.full_shape || t.dtype() != mine[k].second.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorParallelMlp::", what, ": parameter ", k, " of the model given is '", theirs[k].first, "' ",
          DTypeName(t.dtype()), " ", ShapeToString(t.shape()), ", but this model's whole '", p.name, "' is ",
          DTypeName(mine[k].second.dtype()), " ", ShapeToString(p.full_shape), "; pass an nn::MLP of the same dims"));
    }
  }
  return absl::OkStatus();
}

absl::Status TensorParallelMlp::GatherInto(nn::Sequential& full) {
  if (!status().ok()) return status();  // the shards may differ from what one process would hold
  RETURN_IF_ERROR(CheckWhole(full, "GatherInto"));
  const auto mine = NamedParameters();
  // Everything gathered first, then written: a failed gather leaves `full` as it was.
  std::vector<Tensor> whole(mine.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    const PlannedParam& p = plan_.params[k];
    if (p.split == Split::kReplicated) {
      whole[k] = mine[k].second.data();  // the same bits on every tp rank
      continue;
    }
    absl::StatusOr<Tensor> gathered = GatherShards(comm_->group(), mine[k].second.data(), p.full_shape, p.split);
    if (!gathered.ok()) return Annotate(gathered.status(), absl::StrCat("GatherInto, ", p.name));
    whole[k] = *std::move(gathered);
  }
  const auto theirs = full.NamedParameters();
  for (size_t k = 0; k < theirs.size(); ++k) {
    Tensor into = theirs[k].second.data();
    ops::CopyInto(into, whole[k]);
  }
  full.RefreshComputeCopies();
  return absl::OkStatus();
}

absl::Status TensorParallelMlp::LoadFrom(const nn::Sequential& full) {
  RETURN_IF_ERROR(CheckWhole(full, "LoadFrom"));
  const auto mine = NamedParameters();
  const auto theirs = full.NamedParameters();
  for (size_t k = 0; k < mine.size(); ++k) {
    const PlannedParam& p = plan_.params[k];
    const Tensor& whole = theirs[k].second.data();
    Tensor into = mine[k].second.data();
    ops::CopyInto(into,
                  p.split == Split::kReplicated ? whole : SliceShard(whole, p.split, plan_.RangeOf(p, comm_->rank())));
  }
  RefreshComputeCopies();
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::tensor_parallel
