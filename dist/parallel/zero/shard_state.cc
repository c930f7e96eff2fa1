// ZeRO's optimizer state between its sharded and consolidated forms (dist/parallel/zero/shard_state.h).
#include "dist/parallel/zero/shard_state.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "tensor/ops.h"

namespace tinyddp::dist::zero {
namespace {

constexpr char kShardPrefix[] = "state.0.";  // the one parameter of a shard's optimizer

absl::Status Invalid(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("ZeRO optimizer state: ", why));
}

}  // namespace

absl::StatusOr<nn::TensorMap> GatherConsolidatedState(ProcessGroup& pg, const std::vector<ShardedState>& shards,
                                                      const std::vector<ParamInfo>& params) {
  const int world = pg.size();
  nn::TensorMap full;
  for (const ShardedState& s : shards) {
    // Every rank stepped every shard equally often, so every rank lists the same fields in the same
    // (sorted) order, and the all-gathers below match across ranks.
    for (const auto& [name, t] : s.optimizer->StateTensors()) {
      if (name.rfind(kShardPrefix, 0) != 0) return Invalid(absl::StrCat("unexpected shard state '", name, "'"));
      const std::string field = name.substr(sizeof(kShardPrefix) - 1);
      if (t.dim() == 0) {  // one value for the whole block (Adam's step): every parameter of the shard has it
        for (const ParamSpan& p : s.params) full[absl::StrCat("state.", p.index, ".", field)] = t.Clone();
        continue;
      }
      if (t.numel() != s.shard_numel) {
        return Invalid(absl::StrCat("shard field '", name, "' holds ", t.numel(), " elements, not ", s.shard_numel));
      }
      Tensor whole = Tensor::Empty({world * s.shard_numel}, t.dtype(), t.device());
      RETURN_IF_ERROR(pg.AllGather(whole, t)->Wait());
      for (const ParamSpan& p : s.params) {
        full[absl::StrCat("state.", p.index, ".", field)] =
            whole.Rows(p.offset, p.offset + p.numel).View(params[p.index].shape);
      }
    }
  }
  return full;
}

absl::Status ScatterConsolidatedState(int rank, const std::vector<ShardedState>& shards,
                                      const std::vector<ParamInfo>& params, const nn::TensorMap& state) {
  // Sort the entries by parameter: fields[i] = {field -> tensor}.
  std::vector<std::map<std::string, Tensor>> fields(params.size());
  for (const auto& [name, t] : state) {
    const std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
    size_t i = 0;
    if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], &i) || parts[2].empty()) {
      return Invalid(absl::StrCat("'", name, "' is not named state.<parameter>.<field>"));
    }
    if (i >= params.size()) {
      return Invalid(absl::StrCat("'", name, "' names parameter ", i, " but the module has ", params.size()));
    }
    fields[i][parts[2]] = t;
  }
  std::vector<bool> sharded(params.size(), false);
  for (const ShardedState& s : shards) {
    for (const ParamSpan& p : s.params) sharded[p.index] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!fields[i].empty() && !sharded[i]) {
      return Invalid(absl::StrCat("there is state for '", params[i].name, "', which is not trained"));
    }
  }

  // Build every shard's state before loading any, so that a bad state changes nothing.
  std::vector<nn::TensorMap> blocks(shards.size());
  for (size_t b = 0; b < shards.size(); ++b) {
    const ShardedState& s = shards[b];
    const std::map<std::string, Tensor>& first = fields[s.params[0].index];
    std::set<std::string> names;
    for (const auto& [field, t] : first) names.insert(field);
    // One optimizer steps the whole block, so all its parameters must carry the same fields (all or none).
    for (const ParamSpan& p : s.params) {
      std::set<std::string> mine;
      for (const auto& [field, t] : fields[p.index]) mine.insert(field);
      if (mine != names) {
        return Invalid(absl::StrCat("'", params[p.index].name, "' has fields {", absl::StrJoin(mine, ", "), "} but '",
                                    params[s.params[0].index].name, "' of the same shard has {",
                                    absl::StrJoin(names, ", "), "}; ZeRO steps a shard's parameters together"));
      }
    }
    for (const std::string& field : names) {
      const Tensor& sample = first.at(field);
      if (sample.dim() == 0) {  // a scalar per parameter, one per block: they must agree (Adam's step)
        for (const ParamSpan& p : s.params) {
          const Tensor& t = fields[p.index].at(field);
          if (t.dim() != 0 || t.Item() != sample.Item()) {
            return Invalid(absl::StrCat("'", params[p.index].name, "' has ", field, " ", t.Item(), " but '",
                                        params[s.params[0].index].name, "' of the same shard has ", sample.Item(),
                                        "; ZeRO keeps one per shard"));
          }
        }
        blocks[b][absl::StrCat(kShardPrefix, field)] = sample;
        continue;
      }
      for (const ParamSpan& p : s.params) {
        const Tensor& t = fields[p.index].at(field);
        const ParamInfo& param = params[p.index];
        if (t.shape() != param.shape || t.dtype() != param.dtype) {
          return Invalid(absl::StrCat("state.", p.index, ".", field, " is ", DTypeName(t.dtype()), " ",
                                      ShapeToString(t.shape()), " but parameter '", param.name, "' is ",
                                      DTypeName(param.dtype), " ", ShapeToString(param.shape)));
        }
      }
      Tensor block = Tensor::Zeros({s.shard_numel}, s.dtype, s.device);
      for (const ShardPiece& piece : PiecesInShard(s.params, s.shard_numel, rank)) {
        const Tensor source =
            fields[piece.index].at(field).Flatten().Rows(piece.param_begin, piece.param_begin + piece.numel);
        Tensor into = block.Rows(piece.shard_begin, piece.shard_begin + piece.numel);
        ops::CopyInto(into, source.To(block.device()));
      }
      blocks[b][absl::StrCat(kShardPrefix, field)] = block;
    }
  }
  for (size_t b = 0; b < shards.size(); ++b) RETURN_IF_ERROR(shards[b].optimizer->LoadStateTensors(blocks[b]));
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::zero
