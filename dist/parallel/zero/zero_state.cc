// ZeroRedundancyOptimizer (dist/parallel/zero/zero_optimizer.h): the optimizer state between its two forms.
//
//   sharded       what training holds: per bucket, one optimizer over this rank's block, its state named
//                 "state.0.<field>" with one element per element of the block ([shard_numel]), plus
//                 scalars shared by the whole block (Adam's "step").
//   consolidated  what a checkpoint holds: the state of one optimizer over all the module's parameters,
//                 "state.<i>.<field>" shaped like parameter i, exactly what plain DDP's optimizer saves.
//
// Gathering: each sharded field is all-gathered into the whole padded bucket, and each parameter's span of
// it is that parameter's field. Scattering: each rank copies the pieces of each parameter that fall in its
// block (shard_layout.h's PiecesInShard) into a zero-padded block. Both are pure data movement, so a
// gather after a scatter gives back the same bits, whatever the number of ranks on either side.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "tensor/ops.h"

namespace tinyddp::dist::zero {
namespace {

constexpr char kShardPrefix[] = "state.0.";  // the one parameter of a shard's optimizer

absl::Status Invalid(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("ZeRO-1 optimizer state: ", why));
}

}  // namespace

absl::StatusOr<nn::TensorMap> ZeroRedundancyOptimizer::ConsolidatedStateTensors() {
  ReshardIfRebuilt();  // DDP rebuilt its buckets at a Forward whose backward has not run yet (collective)
  if (!status_.ok()) return status_;  // the shards disagree across ranks: there is no one state to save
  RETURN_IF_ERROR(GatherMasters());  // bf16: the module's float32 parameters, for the model file
  return GatherState();
}

absl::Status ZeroRedundancyOptimizer::LoadConsolidatedStateTensors(const nn::TensorMap& state) {
  return ScatterState(state);
}

absl::StatusOr<nn::TensorMap> ZeroRedundancyOptimizer::GatherState() {
  const int world = pg_.size();
  nn::TensorMap full;
  for (Shard& s : shards_) {
    // Every rank stepped every bucket equally often, so every rank lists the same fields in the same
    // (sorted) order, and the all-gathers below match across ranks.
    for (const auto& [name, t] : s.optimizer->StateTensors()) {
      if (name.rfind(kShardPrefix, 0) != 0) return Invalid(absl::StrCat("unexpected shard state '", name, "'"));
      const std::string field = name.substr(sizeof(kShardPrefix) - 1);
      if (t.dim() == 0) {  // one value for the whole block (Adam's step): every parameter of the bucket has it
        for (const ParamSpan& p : s.params) full[absl::StrCat("state.", p.index, ".", field)] = t.Clone();
        continue;
      }
      if (t.numel() != s.shard_numel) {
        return Invalid(absl::StrCat("shard field '", name, "' holds ", t.numel(), " elements, not ", s.shard_numel));
      }
      Tensor whole = Tensor::Empty({world * s.shard_numel}, t.dtype(), t.device());
      RETURN_IF_ERROR(pg_.AllGather(whole, t)->Wait());
      for (const ParamSpan& p : s.params) {
        full[absl::StrCat("state.", p.index, ".", field)] =
            whole.Rows(p.offset, p.offset + p.numel).View(params_[p.index].second.shape());
      }
    }
  }
  return full;
}

absl::Status ZeroRedundancyOptimizer::ScatterState(const nn::TensorMap& state) {
  // Sort the entries by parameter: fields[i] = {field -> tensor}.
  std::vector<std::map<std::string, Tensor>> fields(params_.size());
  for (const auto& [name, t] : state) {
    const std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
    size_t i = 0;
    if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], &i) || parts[2].empty()) {
      return Invalid(absl::StrCat("'", name, "' is not named state.<parameter>.<field>"));
    }
    if (i >= params_.size()) {
      return Invalid(absl::StrCat("'", name, "' names parameter ", i, " but the module has ", params_.size()));
    }
    fields[i][parts[2]] = t;
  }
  std::vector<bool> sharded(params_.size(), false);
  for (const Shard& s : shards_) {
    for (const ParamSpan& p : s.params) sharded[p.index] = true;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!fields[i].empty() && !sharded[i]) {
      return Invalid(absl::StrCat("there is state for '", params_[i].first, "', which DDP does not train"));
    }
  }

  // Build every shard's state before loading any, so that a bad state changes nothing.
  const int rank = pg_.rank();
  std::vector<nn::TensorMap> blocks(shards_.size());
  for (size_t b = 0; b < shards_.size(); ++b) {
    const Shard& s = shards_[b];
    const std::map<std::string, Tensor>& first = fields[s.params[0].index];
    std::set<std::string> names;
    for (const auto& [field, t] : first) names.insert(field);
    // One optimizer steps the whole block, so all its parameters must carry the same fields (all or none).
    for (const ParamSpan& p : s.params) {
      std::set<std::string> mine;
      for (const auto& [field, t] : fields[p.index]) mine.insert(field);
      if (mine != names) {
        return Invalid(absl::StrCat("'", params_[p.index].first, "' has fields {", absl::StrJoin(mine, ", "),
                                    "} but '", params_[s.params[0].index].first, "' of the same bucket has {",
                                    absl::StrJoin(names, ", "), "}; ZeRO-1 steps a bucket's parameters together"));
      }
    }
    for (const std::string& field : names) {
      const Tensor& sample = first.at(field);
      if (sample.dim() == 0) {  // a scalar per parameter, one per block: they must agree (Adam's step)
        for (const ParamSpan& p : s.params) {
          const Tensor& t = fields[p.index].at(field);
          if (t.dim() != 0 || t.Item() != sample.Item()) {
            return Invalid(absl::StrCat("'", params_[p.index].first, "' has ", field, " ", t.Item(), " but '",
                                        params_[s.params[0].index].first, "' of the same bucket has ",
                                        sample.Item(), "; ZeRO-1 keeps one per bucket"));
          }
        }
        blocks[b][absl::StrCat(kShardPrefix, field)] = sample;
        continue;
      }
      for (const ParamSpan& p : s.params) {
        const Tensor& t = fields[p.index].at(field);
        const Tensor& param = params_[p.index].second.data();
        if (t.shape() != param.shape() || t.dtype() != param.dtype()) {
          return Invalid(absl::StrCat("state.", p.index, ".", field, " is ", DTypeName(t.dtype()), " ",
                                      ShapeToString(t.shape()), " but parameter '", params_[p.index].first, "' is ",
                                      DTypeName(param.dtype()), " ", ShapeToString(param.shape())));
        }
      }
      Tensor block = Tensor::Zeros({s.shard_numel}, s.flat.dtype(), s.flat.device());
      for (const ShardPiece& piece : PiecesInShard(s.params, s.shard_numel, rank)) {
        const Tensor source = fields[piece.index].at(field).Flatten().Rows(piece.param_begin,
                                                                           piece.param_begin + piece.numel);
        Tensor into = block.Rows(piece.shard_begin, piece.shard_begin + piece.numel);
        ops::CopyInto(into, source.To(block.device()));
      }
      blocks[b][absl::StrCat(kShardPrefix, field)] = block;
    }
  }
  for (size_t b = 0; b < shards_.size(); ++b) RETURN_IF_ERROR(shards_[b].optimizer->LoadStateTensors(blocks[b]));
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::zero
