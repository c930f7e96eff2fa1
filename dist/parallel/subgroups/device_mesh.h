// DeviceMesh: the world's ranks on a 2-D grid, dp rows by tp columns, with a process group per row and per
// column (torch's init_device_mesh(("dp", "tp"))). A wing (dist/parallel/subgroups/), built from NewGroup.
//
//          tp_index:   0   1   2   3
//   dp_index 0:      [ 0   1   2   3 ]   <- tp_group of ranks 0..3: tensor parallel, within a row
//   dp_index 1:      [ 4   5   6   7 ]
//                      ^ dp_group of ranks 0 and 4: data parallel, down a column
//
// rank = dp_index * tp + tp_index: the ranks of a row are consecutive, so on machines of tp GPUs each row
// is one machine and tensor parallelism (the chatty one: collectives inside every layer) stays on NVLink,
// while the data-parallel all_reduce crosses machines once per step. Each rank is in exactly one row and
// one column; every rank creates every row's and column's group (NewGroup is collective) and keeps its own.
#ifndef TINYDDP_DIST_PARALLEL_SUBGROUPS_DEVICE_MESH_H_
#define TINYDDP_DIST_PARALLEL_SUBGROUPS_DEVICE_MESH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/parallel/subgroups/new_group.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

struct DeviceMesh {
  int dp = 1, tp = 1;               // the grid: dp rows of tp ranks
  int dp_index = 0, tp_index = 0;   // this rank's row and column
  std::shared_ptr<ProcessGroup> tp_group;  // this rank's row, ranks dp_index * tp + [0, tp); rank = tp_index
  std::shared_ptr<ProcessGroup> dp_group;  // this rank's column, ranks [0, dp) * tp + tp_index; rank = dp_index

  /// The world rank at (dp_index, tp_index).
  int RankAt(int dp_index, int tp_index) const { return dp_index * tp + tp_index; }
  /// "mesh 2 x 2 (dp x tp): rank 3 at (1, 1), tp group {2, 3}, dp group {1, 3}".
  std::string ToString(int world_rank) const;

  /// Collective over `world` (dp + tp NewGroup calls, rows first): the mesh and this rank's two groups.
  /// InvalidArgument unless dp >= 1, tp >= 1 and dp * tp == world.size(). `store` as for NewGroup.
  static absl::StatusOr<DeviceMesh> Create(ProcessGroup& world, std::shared_ptr<Store> store, int dp, int tp,
                                           const NewGroupOptions& options = {});
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PARALLEL_SUBGROUPS_DEVICE_MESH_H_
