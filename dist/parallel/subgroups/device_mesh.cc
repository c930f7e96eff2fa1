// DeviceMesh (dist/parallel/subgroups/device_mesh.h): one NewGroup per row, then one per column.
#include "dist/parallel/subgroups/device_mesh.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tinyddp::dist {

std::string DeviceMesh::ToString(int world_rank) const {
  std::vector<int> row, column;
  for (int j = 0; j < tp; ++j) row.push_back(RankAt(dp_index, j));
  for (int i = 0; i < dp; ++i) column.push_back(RankAt(i, tp_index));
  return absl::StrCat("mesh ", dp, " x ", tp, " (dp x tp): rank ", world_rank, " at (", dp_index, ", ", tp_index,
                      "), tp group {", absl::StrJoin(row, ", "), "}, dp group {", absl::StrJoin(column, ", "), "}");
}

absl::StatusOr<DeviceMesh> DeviceMesh::Create(ProcessGroup& world, std::shared_ptr<Store> store, int dp, int tp,
                                              const NewGroupOptions& options) {
  if (dp < 1 || tp < 1 || dp * tp != world.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMesh: a ", dp, " x ", tp, " grid does not hold the ",
                                                   world.size(), " ranks of the world (dp * tp must equal it)"));
  }
  DeviceMesh mesh;
  mesh.dp = dp;
  mesh.tp = tp;
  mesh.dp_index = world.rank() / tp;
  mesh.tp_index = world.rank() % tp;
  // Every rank creates every group in the same order; it is a member of one row and one column.
  for (int i = 0; i < dp; ++i) {
    std::vector<int> row;
    for (int j = 0; j < tp; ++j) row.push_back(mesh.RankAt(i, j));
    ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> group, NewGroup(world, store, row, options));
    if (i == mesh.dp_index) mesh.tp_group = std::move(group);
  }
  for (int j = 0; j < tp; ++j) {
    std::vector<int> column;
    for (int i = 0; i < dp; ++i) column.push_back(mesh.RankAt(i, j));
    ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> group, NewGroup(world, store, column, options));
    if (j == mesh.tp_index) mesh.dp_group = std::move(group);
  }
  return mesh;
}

}  // namespace tinyddp::dist
