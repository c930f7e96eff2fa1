// FullyShardedDataParallel (dist/parallel/zero/fully_sharded.h): the units, the op that gathers a layer
// for its forward and again for its backward, the end-of-backward step, accumulation under NoSync, the
// trace, and the checkpoint forms.
#include "dist/parallel/zero/fully_sharded.h"

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "tensor/ops.h"

namespace tinyddp::dist::zero {
namespace {

constexpr char kOp[] = "FullyShardedDataParallel";

absl::Status Annotate(const absl::Status& status, const std::string& what) {
  return absl::Status(status.code(), absl::StrCat("ZeRO-3: ", what, ": ", status.message()));
}

int64_t Microseconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

std::string FullyShardedMemory::ToString() const {
  const std::string copies =
      compute_copy_bytes > 0 ? absl::StrFormat(" (+ %d bytes of bfloat16 copies, what is gathered)", compute_copy_bytes)
                             : "";
  return absl::StrFormat(
      "this rank keeps %d of %d parameters (ceil(P/%d) = %d, + padding): parameters %d bytes%s, gradients %d bytes, "
      "optimizer state %d bytes between steps; at most %d bytes of whole layers at once (one layer: %d), "
      "%d bytes of staged gradients",
      shard_elements, parameters, world, (parameters + world - 1) / world, parameter_bytes, copies, gradient_bytes,
      optimizer_state_bytes, peak_gathered_bytes, largest_unit_bytes, peak_staging_bytes);
}

// --- Building the units ---------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FullyShardedDataParallel>> FullyShardedDataParallel::Create(
    std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> pg,
    zero::OptimizerFactory factory, const FullyShardedOptions& options) {
  TINYDDP_CHECK_OP(model != nullptr && pg != nullptr && factory != nullptr, kOp, "null model, group or factory");
  // Every parameter must belong to a Linear child, each of whose parameters requires grad.
  const auto& children = model->Children();
  for (const auto& [name, child] : children) {
    auto* linear = dynamic_cast<nn::Linear*>(child.get());
    const std::vector<autograd::Variable> params = child->Parameters();
    if (linear == nullptr && !params.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("ZeRO-3 shards nn::Linear layers only; layer ", name, " (",
                                                     child->ToString(), ") has parameters"));
    }
    for (const autograd::Variable& p : params) {
      if (!p.requires_grad()) {
        return absl::InvalidArgumentError(absl::StrCat("ZeRO-3: layer ", name, " has a frozen parameter; every "
                                                       "parameter of a sharded layer must train"));
      }
    }
  }
  auto named = model->NamedParameters();
  RETURN_IF_ERROR(VerifyParametersMatchAcrossRanks(*pg, named));

  std::unique_ptr<FullyShardedDataParallel> fsdp(new FullyShardedDataParallel(model, pg, options));
  fsdp->bf16_ = model->precision() == nn::Precision::kBFloat16;
  const int world = pg->size(), rank = pg->rank();
  const BlockSize block_size = BlockSizeFor(pg->backend_name());
  size_t next_param = 0;  // named is in children order: a Linear's weight, then its bias
  for (size_t c = 0; c < children.size(); ++c) {
    auto* linear = dynamic_cast<nn::Linear*>(children[c].second.get());
    if (linear == nullptr) continue;
    Unit u;
    u.child = c;
    u.relu = c + 1 < children.size() && dynamic_cast<nn::ReLU*>(children[c + 1].second.get()) != nullptr;
    u.out = linear->out_features();
    u.in = linear->in_features();
    u.has_bias = linear->bias().defined();
    std::vector<autograd::Variable> params = {linear->weight()};
    if (u.has_bias) params.push_back(linear->bias());
    for (const autograd::Variable& p : params) {
      TINYDDP_CHECK_OP(next_param < named.size() && named[next_param].second.Is(p), kOp,
                       "the model's parameters are not in layer order");
      u.params.push_back(ParamSpan{next_param++, u.numel, p.numel()});
      u.numel += p.numel();
    }
    const Tensor& first = params[0].data();
    u.shard_numel = ShardNumel(u.numel, world, static_cast<int64_t>(DTypeSize(first.dtype())), block_size);
    // The layer as one flat buffer, rank 0's values everywhere (as DDP starts), of which this rank keeps
    // block `rank`; the whole buffer goes when this function returns.
    Tensor flat = Tensor::Zeros({world * u.shard_numel}, first.dtype(), first.device());
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor into = flat.Rows(u.params[i].offset, u.params[i].offset + u.params[i].numel);
      ops::CopyInto(into, params[i].data().Flatten());
    }
    if (absl::Status s = pg->Broadcast(flat, 0)->Wait(); !s.ok()) {
      return Annotate(s, absl::StrCat("broadcasting rank 0's layer ", children[c].first));
    }
    u.master = autograd::Variable(flat.Rows(rank * u.shard_numel, (rank + 1) * u.shard_numel).Clone(),
                                  /*requires_grad=*/true, absl::StrCat("zero3.layer", children[c].first));
    u.grad_block = Tensor::Zeros({u.shard_numel}, first.dtype(), first.device());
    u.master.set_grad_destination(u.grad_block);  // where the layer's op reduce-scatters its gradient
    u.optimizer = factory({u.master});
    TINYDDP_CHECK_OP(u.optimizer != nullptr, kOp, "the optimizer factory returned null");
    if (fsdp->bf16_) {
      // The shard's compute copy: rank 0's values rounded, as DDP's broadcast then RefreshComputeCopies
      // leave them; from now on each step writes it (the float32 update and bf16(p) in one pass).
      u.copy = Tensor::Empty({u.shard_numel}, DType::kBFloat16, first.device());
      ops::CastInto(u.copy, u.master.data());
      u.optimizer->SetComputeCopies({{u.master, u.copy}});
    }
    fsdp->units_.push_back(std::move(u));
  }
  TINYDDP_CHECK_OP(next_param == named.size(), kOp, "some parameter belongs to no Linear layer");
  for (const auto& [name, p] : named) fsdp->params_.push_back({name, p.shape(), p.dtype()});
  fsdp->named_ = std::move(named);
  fsdp->ReleaseFullParameters();  // the model keeps its Variables, emptied
  return fsdp;
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Sequential> model,
                                                   std::shared_ptr<ProcessGroup> pg,
                                                   const FullyShardedOptions& options)
    : model_(std::move(model)), pg_(std::move(pg)), tracer_(options.tracer) {}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  // Collectives still in flight read or write buffers held here: let them finish first.
  for (Unit& u : units_) {
    if (u.gather) u.gather->Wait().IgnoreError();
    if (u.reduce) u.reduce->Wait().IgnoreError();
  }
}

FullyShardedDataParallel::NoSyncGuard::~NoSyncGuard() {
  if (fsdp_ != nullptr) fsdp_->no_sync_ = previous_;
}

FullyShardedDataParallel::NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : fsdp_(other.fsdp_), previous_(other.previous_) {
  other.fsdp_ = nullptr;
}

FullyShardedDataParallel::NoSyncGuard FullyShardedDataParallel::NoSync() {
  NoSyncGuard guard(this, no_sync_);
  no_sync_ = true;
  return guard;
}

// --- Tracing ------------------------------------------------------------------------------------------

std::shared_ptr<Work> FullyShardedDataParallel::Issue(const char* name, size_t index,
                                                      const std::function<std::shared_ptr<Work>()>& collective) {
  Tracer* tracer = Tracer::Active(tracer_);
  const cuda::Stream comm = tracer != nullptr && tracer->on_gpu() ? pg_->collective_stream() : cuda::Stream();
  if (comm.handle() == nullptr) return collective();  // untraced, or a group of host threads (TraceCompleted)
  // The group's stream first waits for the compute stream (the group adds the same wait before its
  // collective; a second one is free), so the begin event marks when the collective can really start.
  if (fence_ == nullptr) fence_ = std::make_unique<cuda::Event>();
  fence_->Record(cuda::Stream::Current(comm.device()));
  comm.Wait(*fence_);
  const int slot = tracer->BeginGpu(comm);
  std::shared_ptr<Work> work = collective();
  tracer->EndGpu(slot, comm, TraceTrack::kComm, name, static_cast<int64_t>(index));
  return work;
}

void FullyShardedDataParallel::TraceCompleted(const char* name, size_t index, Work& work) {
  Tracer* tracer = Tracer::Active(tracer_);
  std::chrono::steady_clock::time_point start, end;
  if (tracer == nullptr || !work.HostInterval(&start, &end)) return;  // GPU work was bracketed by Issue
  tracer->AddHostEvent(TraceTrack::kComm, name, Microseconds(start), Microseconds(end), static_cast<int64_t>(index));
}

// --- Gathering and freeing a layer ------------------------------------------------------------------

void FullyShardedDataParallel::StartGather(size_t index) {
  Unit& u = units_[index];
  if (u.full.defined()) return;  // gathered, or being gathered
  // Under bf16 the layer travels and computes as its bfloat16 copies: half the bytes of the masters.
  const Tensor& mine = bf16_ ? u.copy : u.master.data();
  u.full = Tensor::Empty({pg_->size() * u.shard_numel}, mine.dtype(), mine.device());
  gathered_bytes_ += static_cast<int64_t>(u.full.nbytes());
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  u.gather = Issue("all_gather", index, [&] { return pg_->AllGather(u.full, mine); });
}

const Tensor& FullyShardedDataParallel::FinishGather(size_t index) {
  StartGather(index);  // not prefetched (the first layer's forward, the last layer's backward after a Free)
  Unit& u = units_[index];
  if (u.gather != nullptr) {
    const absl::Status s = u.gather->SynchronizeStream();  // GPU: an event wait; CPU: waits for Gloo
    TraceCompleted("all_gather", index, *u.gather);
    u.gather.reset();
    if (!s.ok()) Fail(Annotate(s, absl::StrCat("all_gather of layer ", model_->Children()[u.child].first)));
  }
  return u.full;
}

void FullyShardedDataParallel::Free(size_t index) {
  Unit& u = units_[index];
  if (!u.full.defined()) return;
  if (u.gather != nullptr) FinishGather(index);  // never free what a collective still writes
  gathered_bytes_ -= static_cast<int64_t>(u.full.nbytes());
  u.full = Tensor();
}

// --- Forward ----------------------------------------------------------------------------------------

autograd::Variable FullyShardedDataParallel::Forward(const autograd::Variable& x) {
  ReleaseFullParameters();  // a checkpoint's gathered model is not kept while training
  const bool training = autograd::GradModeEnabled();
  const bool sync = !no_sync_;  // decided now, for the backward this forward records
  const auto& children = model_->Children();
  autograd::Variable y = x;
  size_t next_unit = 0;
  for (size_t c = 0; c < children.size(); ++c) {
    if (next_unit < units_.size() && units_[next_unit].child == c) {
      // bf16: cast where the activation is not bfloat16 yet (the first layer's input), as nn::Linear does.
      if (bf16_ && y.dtype() != DType::kBFloat16) y = autograd::Cast(y, DType::kBFloat16);
      y = RunUnit(next_unit, y, training, sync);
      if (units_[next_unit++].relu) ++c;  // the ReLU ran inside the layer's op
      continue;
    }
    y = children[c].second->Forward(y);  // a layer without parameters
  }
  return y;
}

autograd::Variable FullyShardedDataParallel::RunUnit(size_t index, const autograd::Variable& x, bool training,
                                                     bool sync) {
  Unit& u = units_[index];
  StartGather(index);
  if (index + 1 < units_.size()) StartGather(index + 1);  // prefetch: the next layer arrives while this computes
  const Tensor& full = FinishGather(index);
  Tracer::Span span = Tracer::MaybeScope(tracer_, "forward layer", static_cast<int64_t>(index));
  const Tensor w = full.Rows(0, u.out * u.in).View({u.out, u.in});
  Tensor b = u.has_bias ? full.Rows(u.out * u.in, u.numel) : Tensor();
  // The bias sits right after the weight in the gathered buffer, out * in elements in: under bf16 that can be
  // an address aligned to 2 bytes only, which the GPU GEMM's bias epilogue (ops::Linear) does not read
  // correctly (measured on an H200: results that changed from run to run). An aligned copy of it, as every
  // allocation is and as plain DDP's layer reads, costs one small copy a layer.
  // (The CPU's kernels read any address: no copy there.)
  if (b.defined() && b.device().is_cuda() && reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 != 0) b = b.Clone();
  const Tensor xd = x.data();
  // The same kernels as autograd::Linear / LinearRelu (autograd/linear.cc), so the same bits.
  Tensor y = u.relu ? ops::LinearRelu(xd, w, b) : ops::Linear(xd, w, b);
  const Tensor relu_out = u.relu ? y : Tensor();
  // The op's inputs: the activation and this rank's shard of the layer. It saves the activation only; the
  // weights are gathered again when its backward runs.
  autograd::Variable out = autograd::Record(
      u.relu ? "ShardedLinearRelu" : "ShardedLinear", std::move(y), {x, u.master},
      [this, index, xd, relu_out, sync](const Tensor& dy, const autograd::NeedsGrad& needs) {
        return BackwardUnit(index, xd, relu_out, dy, needs, sync);
      });
  // Free the layer, unless its backward is next (the last layer's, in training).
  if (!(training && index + 1 == units_.size())) Free(index);
  return out;
}

// --- Backward ---------------------------------------------------------------------------------------

autograd::Grads FullyShardedDataParallel::BackwardUnit(size_t index, const Tensor& x, const Tensor& relu_out,
                                                       const Tensor& dy, const autograd::NeedsGrad& needs, bool sync) {
  if (!in_backward_) {
    in_backward_ = true;
    autograd::QueueCallback([this, sync] { FinishBackward(sync); });
  }
  Unit& u = units_[index];
  StartGather(index);
  if (index > 0) StartGather(index - 1);  // prefetch: the layer whose backward comes next
  const Tensor& full = FinishGather(index);
  const Tensor w = full.Rows(0, u.out * u.in).View({u.out, u.in});

  // dx = dy @ w first: it overlaps the previous layer's reduce-scatter, which the staging below waits for.
  autograd::Grads grads(2);
  Tensor g;
  {
    Tracer::Span span = Tracer::MaybeScope(tracer_, "backward layer", static_cast<int64_t>(index));
    g = relu_out.defined() ? ops::ReluBackward(dy, relu_out) : dy;
    if (needs[0]) grads[0] = ops::MatMul(g, w);
  }

  // The layer's gradient, whole, in the flat layout of its parameters (padding zero): what the
  // reduce-scatter averages. The same kernels as autograd/linear.cc's backward. One layer is staged at a
  // time: the group runs its collectives one after another anyway (Gloo's thread, NCCL's stream), so
  // waiting for the previous reduce-scatter here costs only what dW would have overlapped.
  while (!reducing_.empty()) DrainOneReduce();
  Tracer::Span span = Tracer::MaybeScope(tracer_, "backward layer", static_cast<int64_t>(index));
  // After backwards under NoSync the layer's sum is there: this gradient is added into it (beta = 1), as
  // autograd/linear.cc adds into a .grad that DDP's local backwards filled.
  const bool adding = u.sum.defined();
  if (!adding) {
    u.sum = Tensor::Empty({pg_->size() * u.shard_numel}, u.master.dtype(), u.master.device());
    staging_bytes_ += static_cast<int64_t>(u.sum.nbytes());
    peak_staging_bytes_ = std::max(peak_staging_bytes_, staging_bytes_);
  }
  const float beta = adding ? 1.f : 0.f;
  Tensor dw = u.sum.Rows(0, u.out * u.in).View({u.out, u.in});
  ops::MatMulInto(dw, g, x, /*trans_a=*/true, /*trans_b=*/false, /*alpha=*/1.f, beta);
  if (u.has_bias) {
    Tensor db = u.sum.Rows(u.out * u.in, u.numel);
    ops::SumRowsInto(db, g, beta);
  }
  if (!adding && u.sum.numel() > u.numel) {
    Tensor padding = u.sum.Rows(u.numel, u.sum.numel());
    ops::Fill(padding, 0.0);
  }
  Free(index);
  // NoSync: keep the sum for the next backward; nothing for the engine (FinishBackward clears what it
  // takes as the master's gradient).
  if (!sync) return grads;

  // Reduce-scatter into this rank's gradient block.
  u.staging = std::move(u.sum);
  u.sum = Tensor();
  if (const Tensor* block = needs.write_into(1)) {
    // The engine offers the master's gradient destination (its .grad is undefined since the last step):
    // the reduce-scatter fills it while backward goes on; FinishBackward waits for it.
    u.reduce = Issue("reduce_scatter", index, [&] { return pg_->ReduceScatter(*block, u.staging, ReduceOp::kAvg); });
    reducing_.push_back(index);
  } else {
    // Not offered (the master already has a gradient: a second backward before a step). Correct, slower:
    // wait here and hand the block to the engine, which adds it to .grad.
    Tensor mine = Tensor::Empty({u.shard_numel}, u.staging.dtype(), u.staging.device());
    std::shared_ptr<Work> work =
        Issue("reduce_scatter", index, [&] { return pg_->ReduceScatter(mine, u.staging, ReduceOp::kAvg); });
    const absl::Status s = work->SynchronizeStream();
    TraceCompleted("reduce_scatter", index, *work);
    if (!s.ok()) Fail(Annotate(s, "reduce_scatter of a layer's gradient"));
    staging_bytes_ -= static_cast<int64_t>(u.staging.nbytes());
    u.staging = Tensor();
    grads[1] = mine;
  }
  return grads;
}

void FullyShardedDataParallel::DrainOneReduce() {
  const size_t index = reducing_.front();
  Unit& u = units_[index];
  reducing_.pop_front();
  const absl::Status s = u.reduce->SynchronizeStream();
  TraceCompleted("reduce_scatter", index, *u.reduce);
  u.reduce.reset();
  staging_bytes_ -= static_cast<int64_t>(u.staging.nbytes());
  u.staging = Tensor();  // GPU: reusable at once by the compute stream, which now waits for the collective
  if (!s.ok()) {
    Fail(Annotate(s, absl::StrCat("reduce_scatter of layer ", model_->Children()[u.child].first, "'s gradient")));
  }
}

void FullyShardedDataParallel::FinishBackward(bool sync) {
  in_backward_ = false;
  while (!reducing_.empty()) DrainOneReduce();
  for (size_t i = 0; i < units_.size(); ++i) Free(i);  // a prefetch no backward used
  if (!sync) {
    // A local backward: the sums wait in the units. The engine took each master's (unwritten) gradient
    // destination as its .grad; clear it, so that the synchronised backward is offered the destination.
    for (Unit& u : units_) u.master.set_grad(Tensor());
    return;
  }
  if (!status_.ok()) return;  // the blocks are not averages: step nothing
  Tracer::Span span = Tracer::MaybeScope(tracer_, "optimizer");
  for (Unit& u : units_) {
    u.optimizer->Step();          // block r of the parameters, with block r of the averaged gradient
    u.master.set_grad(Tensor());  // so that the next backward is offered the destination again
  }
}

void FullyShardedDataParallel::Fail(const absl::Status& status) {
  if (status_.ok()) status_ = status;
}

// --- Learning rate, memory, description -------------------------------------------------------------

void FullyShardedDataParallel::SetLr(double lr) {
  for (Unit& u : units_) u.optimizer->set_lr(lr);
}

FullyShardedMemory FullyShardedDataParallel::Memory() const {
  FullyShardedMemory m;
  m.world = pg_->size();
  for (const Unit& u : units_) {
    m.parameters += u.numel;
    m.shard_elements += u.shard_numel;
    m.parameter_bytes += static_cast<int64_t>(u.master.data().nbytes());
    if (u.copy.defined()) m.compute_copy_bytes += static_cast<int64_t>(u.copy.nbytes());
    m.gradient_bytes += static_cast<int64_t>(u.grad_block.nbytes());
    for (const auto& [name, t] : u.optimizer->StateTensors()) {
      if (t.dim() > 0) m.optimizer_state_bytes += static_cast<int64_t>(t.nbytes());
    }
    const int64_t sent = static_cast<int64_t>((u.copy.defined() ? u.copy : u.grad_block).nbytes());
    const int64_t gradient = static_cast<int64_t>(u.grad_block.nbytes());
    m.largest_unit_bytes = std::max(m.largest_unit_bytes, m.world * sent);
    m.largest_gradient_bytes = std::max(m.largest_gradient_bytes, m.world * gradient);
  }
  m.peak_gathered_bytes = peak_gathered_bytes_;
  m.peak_staging_bytes = peak_staging_bytes_;
  return m;
}

std::vector<int64_t> FullyShardedDataParallel::UnitBytes() const {
  std::vector<int64_t> bytes;
  for (const Unit& u : units_) {
    bytes.push_back(pg_->size() * static_cast<int64_t>((u.copy.defined() ? u.copy : u.master.data()).nbytes()));
  }
  return bytes;
}

std::string FullyShardedDataParallel::ShardTable() const {
  std::string out = absl::StrFormat(
      "ZeRO-3: each layer's weight and bias are one flat buffer cut into %d blocks; rank r keeps block r of the "
      "parameters, gradients and optimizer state. A layer is all-gathered just before its forward (the next one "
      "prefetched), freed after, gathered again for its backward, and its gradient reduce-scattered at once:\n",
      pg_->size());
  for (const Unit& u : units_) {
    absl::StrAppendFormat(&out, "  layer %s: %d elements = %d x %d (padding %d)\n",
                          model_->Children()[u.child].first, u.numel, pg_->size(), u.shard_numel,
                          pg_->size() * u.shard_numel - u.numel);
  }
  return out;
}

std::string FullyShardedDataParallel::ToString() const {
  return absl::StrCat("FullyShardedDataParallel(", pg_->size(), " ranks, ", units_.size(), " layers sharded)\n",
                      model_->ToString());
}

// --- Checkpoints --------------------------------------------------------------------------------------

absl::Status FullyShardedDataParallel::GatherFullParameters() {
  for (const Unit& u : units_) {
    Tensor full = Tensor::Empty({pg_->size() * u.shard_numel}, u.master.dtype(), u.master.device());
    if (absl::Status s = pg_->AllGather(full, u.master.data())->Wait(); !s.ok()) {
      return Annotate(s, "gathering the parameters");
    }
    for (const ParamSpan& p : u.params) {
      const autograd::Variable& param = named_[p.index].second;
      param.set_data(full.Rows(p.offset, p.offset + p.numel).View(params_[p.index].shape));
      // bf16: the model whole also computes as one process would, with copies cast from the masters, which
      // are the gathered copies' values (each step writes bf16 of the master it writes).
      if (bf16_) model_->SetComputeCopy(param, Tensor::Empty(params_[p.index].shape, DType::kBFloat16, param.device()));
    }
  }
  return absl::OkStatus();
}

void FullyShardedDataParallel::ReleaseFullParameters() {
  for (size_t i = 0; i < named_.size(); ++i) {
    const autograd::Variable& p = named_[i].second;
    if (p.numel() == 0) continue;
    p.set_grad(Tensor());
    p.set_data(Tensor::Empty({0}, params_[i].dtype, p.device()));
    // bf16: the model's compute copies go too (a whole bfloat16 model otherwise stays on every rank).
    if (bf16_) model_->SetComputeCopy(p, Tensor::Empty({0}, DType::kBFloat16, p.device()));
  }
}

std::vector<ShardedState> FullyShardedDataParallel::States() const {
  std::vector<ShardedState> states;
  for (const Unit& u : units_) {
    states.push_back({u.params, u.shard_numel, u.optimizer.get(), u.master.dtype(), u.master.device()});
  }
  return states;
}

absl::StatusOr<nn::TensorMap> FullyShardedDataParallel::ConsolidatedStateTensors() {
  if (!status_.ok()) return status_;
  return GatherConsolidatedState(*pg_, States(), params_);
}

absl::Status FullyShardedDataParallel::LoadConsolidatedStateTensors(const nn::TensorMap& state) {
  return ScatterConsolidatedState(pg_->rank(), States(), params_, state);
}

}  // namespace tinyddp::dist::zero
