// TensorParallelMlp's optimizer state in one process's form and back (dist/parallel/tensor/
// tensor_parallel_mlp.h). An optimizer over the shards keeps, per parameter, tensors of the shard's shape
// (SGD's momentum_buffer, Adam's exp_avg and exp_avg_sq) and scalars (Adam's step). The whole model's state
// has the same fields under the whole model's parameter numbering: each tensor of a sharded parameter's
// shape is gathered (or sliced) exactly as the parameter is, and everything else is taken as it is, since
// it is the same on every tp rank (the tp ranks step the same number of times). Nothing here knows which
// optimizer it is: any whose state is elementwise works.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "dist/parallel/tensor/gather_shards.h"
#include "dist/parallel/tensor/tensor_parallel_mlp.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

// "state.<index>.<field>" -> (index, field), as nn::Optimizer names its state.
absl::Status ParseKey(const std::string& key, size_t count, size_t* index, std::string* field) {
  std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('.', 2));
  uint64_t i = 0;
  if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], &i) || parts[2].empty()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state: '", key, "' is not state.<index>.<field>"));
  }
  if (i >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state: '", key, "' names parameter ", i, ", but there are ", count));
  }
  *index = static_cast<size_t>(i);
  *field = parts[2];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<size_t>> TensorParallelMlp::PositionsOf(const nn::Optimizer& local) const {
  const auto mine = NamedParameters();
  std::vector<size_t> positions;
  for (size_t i = 0; i < local.params().size(); ++i) {
    size_t k = 0;
    while (k < mine.size() && !mine[k].second.Is(local.params()[i])) ++k;
    if (k == mine.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorParallelMlp: the optimizer's parameter ", i, " ('", local.params()[i].name(),
          "') is not one of this model's shards; build the optimizer over TensorParallelMlp::Parameters()"));
    }
    positions.push_back(k);
  }
  return positions;
}

absl::StatusOr<nn::TensorMap> TensorParallelMlp::GatherOptimizerState(const nn::Optimizer& local) {
  if (!status().ok()) return status();
  ASSIGN_OR_RETURN(std::vector<size_t> positions, PositionsOf(local));
  const nn::TensorMap state = local.StateTensors();
  // The gathers below are matched across ranks by their order, so every rank must walk the same entries:
  // compare the count first (cheap, and a mismatch would otherwise hang or mix up tensors).
  const Device device = NamedParameters().front().second.device();  // where the group carries tensors
  const Tensor count = Tensor::FromVector<int64_t>({static_cast<int64_t>(state.size())}, {1}, device);
  const Tensor counts = Tensor::Empty({comm_->size()}, DType::kInt64, device);
  if (absl::Status s = comm_->group().AllGather(counts, count)->Wait(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("TensorParallelMlp::GatherOptimizerState: ", s.message()));
  }
  const std::vector<int64_t> all = counts.To(Device::CPU()).ToVector<int64_t>();
  for (int r = 0; r < comm_->size(); ++r) {
    if (all[r] != all[0]) {
      return absl::FailedPreconditionError(
          absl::StrCat("TensorParallelMlp::GatherOptimizerState: tp rank ", r, "'s optimizer holds ", all[r],
                       " state tensors, tp "
                       "rank 0's ",
                       all[0], "; every tp rank must step the same parameters the same number of times"));
    }
  }
  const auto mine = NamedParameters();
  nn::TensorMap whole;
  for (const auto& [key, t] : state) {
    size_t i = 0;
    std::string field;
    RETURN_IF_ERROR(ParseKey(key, positions.size(), &i, &field));
    const size_t k = positions[i];
    const PlannedParam& p = plan_.params[k];
    Tensor value;
    if (p.split != Split::kReplicated && t.shape() == mine[k].second.shape()) {
      absl::StatusOr<Tensor> gathered = GatherShards(comm_->group(), t, p.full_shape, p.split);
      if (!gathered.ok()) {
        return absl::Status(gathered.status().code(), absl::StrCat("TensorParallelMlp::GatherOptimizerState, ", key,
                                                                   ": ", gathered.status().message()));
      }
      value = *std::move(gathered);
    } else {
      value = t.Clone();  // whole already (a replicated parameter's), or a scalar such as Adam's step
    }
    whole[absl::StrCat("state.", k, ".", field)] = std::move(value);
  }
  return whole;
}

absl::Status TensorParallelMlp::LoadOptimizerState(const nn::TensorMap& full_state, nn::Optimizer& local) {
  ASSIGN_OR_RETURN(std::vector<size_t> positions, PositionsOf(local));
  std::vector<int> local_index(plan_.params.size(), -1);  // whole-model position -> the optimizer's index
  for (size_t i = 0; i < positions.size(); ++i) local_index[positions[i]] = static_cast<int>(i);
  const int rank = comm_->rank();
  nn::TensorMap mine;
  for (const auto& [key, t] : full_state) {
    size_t k = 0;
    std::string field;
    RETURN_IF_ERROR(ParseKey(key, plan_.params.size(), &k, &field));
    const PlannedParam& p = plan_.params[k];
    if (local_index[k] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("TensorParallelMlp::LoadOptimizerState: '", key, "' is for '",
                                                     p.name, "', which the optimizer does not hold"));
    }
    Tensor piece;
    if (t.shape() == p.full_shape) {
      piece = p.split == Split::kReplicated ? t : SliceShard(t, p.split, plan_.RangeOf(p, rank));
    } else if (t.dim() == 0) {
      piece = t;  // a scalar (Adam's step): the same for every shard
    } else {
      return absl::InvalidArgumentError(absl::StrCat("TensorParallelMlp::LoadOptimizerState: '", key, "' is ",
                                                     ShapeToString(t.shape()), ", but parameter ", k, " ('", p.name,
                                                     "') of the whole model is ", ShapeToString(p.full_shape),
                                                     "; load a state saved for a model of the same dims"));
    }
    mine[absl::StrCat("state.", local_index[k], ".", field)] = std::move(piece);
  }
  return local.LoadStateTensors(mine);  // checks the fields and dtypes; changes nothing when it refuses
}

}  // namespace tinyddp::dist::tensor_parallel
