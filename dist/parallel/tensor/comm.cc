// TensorParallelComm (dist/parallel/tensor/comm.h).
#include "dist/parallel/tensor/comm.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tinyddp::dist::tensor_parallel {

TensorParallelComm::TensorParallelComm(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {
  TINYDDP_CHECK_OP(group_ != nullptr, "TensorParallelComm", "the tp group is null");
}

void TensorParallelComm::AllReduceSum(Tensor& t, const std::string& layer, const char* what) {
  if (!status_.ok()) return;  // the group already failed: this sum would fail too, after the timeout
  const absl::Status s = group_->AllReduce(t, ReduceOp::kSum)->SynchronizeStream();
  if (!s.ok()) {
    status_ = absl::Status(s.code(), absl::StrCat("tensor parallel: the all_reduce of ", layer, "'s ", what,
                                                  " over the tp group (", group_->size(),
                                                  " ranks) failed; the tp "
                                                  "ranks' results differ from here on, stop training: ",
                                                  s.message()));
  }
}

}  // namespace tinyddp::dist::tensor_parallel
