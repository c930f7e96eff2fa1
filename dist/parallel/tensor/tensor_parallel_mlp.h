// TensorParallelMlp: an MLP whose layers are split over a tensor-parallel group, Megatron-LM style (Shoeybi
// et al. 2019). The tensor-parallel wing (dist/parallel/tensor/, docs/tensor_parallel.md); the rung of the
// ladder after ZeRO (docs/zero.md): ZeRO splits what a rank *stores* and still computes every layer whole;
// tensor parallelism splits the *computation* of each layer, so a layer too large for one GPU's memory or
// time is computed by several at once.
//
//   auto mesh = dist::DeviceMesh::Create(*world, store, dp, tp).value();          // rows: tp, columns: dp
//   auto full = nn::MLP(dims, {.seed = seed});                                    // the same on every rank
//   auto model = TensorParallelMlp::Create(*full, mesh.tp_group).value();        // collective over tp
//   auto ddp = DistributedDataParallel::Create(*model, mesh.dp_group).value();   // data parallel across rows
//   nn::SGD sgd(model->Parameters(), options);                                    // the local shards
//   for (...) {                                  // the tp ranks of a row see the same batch
//     sgd.ZeroGrad();
//     autograd::Backward(CrossEntropy(ddp->Forward(x), y));
//     RETURN_IF_ERROR(model->status());          // a tp all_reduce failed
//     RETURN_IF_ERROR(ddp->status());            // a dp all_reduce failed
//     sgd.Step();
//   }
//
// How the layers are cut (mlp_plan.h): Linear layers two by two, the first column-parallel
// (column_parallel_linear.h), the second row-parallel (row_parallel_linear.h), with the two conjugate ops
// between them (region_ops.h); an odd last Linear stays replicated. Every tp rank computes the same output
// and the same loss; the data-parallel group (DDP) sees an ordinary module whose parameters are this rank's
// shards. Every Forward is collective over the tp group (evaluation too): the ranks of a row call it together.
//
// One model, whatever the mesh: Create starts from the whole model as one process built it (tp rank 0's
// values, broadcast), so the initialisation is one process's; GatherInto and GatherOptimizerState give back
// exactly the names and shapes one process has, for checkpoints; LoadFrom and LoadOptimizerState cut such a
// checkpoint for any tp size. The results equal one process's within float reassociation only: a row-parallel
// layer adds its input features in tp partial sums, and the all_reduce adds those.
//
// Tracing (set_tracer): each layer's compute as spans on the compute track ("forward layer",
// "backward layer"; arg = the layer's position among the Linears, 0 first, as FullyShardedDataParallel
// records its layers), and each all_reduce on the communication track, "all_reduce (g)" in forward and
// "all_reduce (f)" in backward, same arg (comm.h). The gaps between a forward's or a backward's layers are
// then the rank waiting for its sums: tools/timeline draws them lighter, and the sums red, as exposed.
// docs/images/tp_timeline.svg is such a trace, drawn (tp_timeline.cc). Without a tracer the forward records
// the same graph as before and nothing else.
//
// Precision: the whole model's (Module::SetPrecision): under bf16 the shards get bfloat16 compute copies;
// hand ComputeCopies() to the optimizer as for a plain model. Devices: the model's, with a group of that
// device (Gloo: CPU; NCCL: this rank's GPU). Not thread-safe: the training thread.
#ifndef TINYDDP_DIST_PARALLEL_TENSOR_TENSOR_PARALLEL_MLP_H_
#define TINYDDP_DIST_PARALLEL_TENSOR_TENSOR_PARALLEL_MLP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/tensor/comm.h"
#include "dist/parallel/tensor/mlp_plan.h"
#include "dist/process_group/process_group.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/sequential.h"
#include "nn/tensor_map.h"

namespace tinyddp::dist::tensor_parallel {

class TensorParallelMlp : public nn::Module {
 public:
  /// Collective over `tp_group` (every member calls it with the same model): checks that every rank holds
  /// the same parameter names and shapes, broadcasts tp rank 0's values, and keeps this rank's shards
  /// (copies: `full` is not changed, nor used afterwards). InvalidArgument, saying what to change, for a null
  /// group, a group that cannot carry the model's tensors (Gloo for a CUDA model, NCCL for a CPU model or
  /// another GPU), or a model the plan refuses (TensorParallelPlan::Make: not an MLP of Linear layers and
  /// elementwise activations; a hidden layer narrower than the group). FailedPrecondition when the ranks'
  /// models differ in shape; the group's error when a collective fails.
  static absl::StatusOr<std::unique_ptr<TensorParallelMlp>> Create(const nn::Sequential& full,
                                                                   std::shared_ptr<ProcessGroup> tp_group);

  /// x [N, in] (the same on every tp rank) -> [N, out], the same bits on every tp rank. Collective.
  autograd::Variable Forward(const autograd::Variable& x) override;
  std::string ToString() const override;

  /// OK, or the first failed all_reduce of the tp group (in a forward or a backward): the ranks' results are
  /// wrong from there on and training must stop. Check it after every Backward.
  const absl::Status& status() const { return comm_->status(); }
  const TensorParallelPlan& plan() const { return plan_; }
  ProcessGroup& tp_group() const { return comm_->group(); }
  /// The plan's table (TensorParallelPlan::Describe) for `batch_size` rows per step: for rank 0 to print.
  std::string Describe(int64_t batch_size) const { return plan_.Describe(batch_size); }
  /// Records each layer's compute and all_reduces into `tracer` (the header's "Tracing"); null: nothing. The
  /// tracer must outlive the model, or be unset first. Forwards run after it are traced.
  void set_tracer(Tracer* tracer) { comm_->set_tracer(tracer); }
  /// Bytes of each Linear's all_reduce per step, for `batch_size` rows, in the trace's numbering (the
  /// timeline's labels, TraceSvgOptions::bucket_bytes): a row layer's output (g, forward), a column layer's
  /// input gradient (f, backward; 0 for the first layer, whose input is the data), 0 for a replicated one.
  std::vector<int64_t> AllReduceBytes(int64_t batch_size) const;

  // --- One process's model and optimizer state ----------------------------------------------------------
  /// Collective over the tp group: writes the whole model into `full` on every tp rank (the sharded
  /// parameters all-gathered, the replicated ones copied), then refreshes its compute copies. `full` must
  /// have the model's names and shapes (nn::MLP of the same dims); any device. InvalidArgument, changing
  /// nothing, when it has not; status() when it is not OK; the group's error when a gather fails.
  absl::Status GatherInto(nn::Sequential& full);
  /// Not collective: replaces this rank's shards with its slices of `full` (a checkpoint written by one
  /// process, or by GatherInto at any tp size), and refreshes the compute copies. Every tp rank must load
  /// the same `full`. InvalidArgument, changing nothing, when its names or shapes are not the model's.
  absl::Status LoadFrom(const nn::Sequential& full);
  /// Collective over the tp group: the state an optimizer over the whole model's Parameters() would return
  /// from StateTensors() ("state.<i>.<field>", i the parameter's position in the whole model, each tensor
  /// of the whole parameter's shape; scalars such as Adam's step as they are), from `local`, an optimizer
  /// over this model's Parameters() (any order). New tensors, on the parameters' device. InvalidArgument when
  /// `local` holds a parameter that is not one of this model's; FailedPrecondition when the tp ranks' states
  /// have different entries (a rank stepped parameters the others did not).
  absl::StatusOr<nn::TensorMap> GatherOptimizerState(const nn::Optimizer& local);
  /// Not collective: loads into `local` (an optimizer over this model's Parameters()) this rank's slices of
  /// `full_state`, a state in the whole model's numbering and shapes (as GatherOptimizerState returns and a
  /// one-process optimizer saves). InvalidArgument, changing nothing, when a tensor is not of its parameter's
  /// whole shape (scalars excepted) or names a parameter `local` does not hold; the optimizer's own refusals.
  absl::Status LoadOptimizerState(const nn::TensorMap& full_state, nn::Optimizer& local);

 private:
  TensorParallelMlp(TensorParallelPlan plan, std::shared_ptr<TensorParallelComm> comm);
  // InvalidArgument unless `full` has the plan's parameter names and shapes.
  absl::Status CheckWhole(const nn::Module& full, const char* what) const;
  // For each of local.params(), its position in NamedParameters(); InvalidArgument for a stranger.
  absl::StatusOr<std::vector<size_t>> PositionsOf(const nn::Optimizer& local) const;

  TensorParallelPlan plan_;
  std::shared_ptr<TensorParallelComm> comm_;
};

}  // namespace tinyddp::dist::tensor_parallel

#endif  // TINYDDP_DIST_PARALLEL_TENSOR_TENSOR_PARALLEL_MLP_H_
