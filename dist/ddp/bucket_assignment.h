// Bucket assignment: which parameters share a gradient bucket, and in which order the buckets go.
// A pure function, kept apart from the Reducer (dist/ddp/reducer.h) so it can be read and tested alone.
//
// PyTorch's rule (torch.distributed._compute_bucket_assignment_by_size): walk the parameters in the
// order their gradients are expected to become ready (reverse registration order at first, the observed
// order after the first iteration); add each to the open bucket of its dtype; close that bucket once it
// holds at least its size limit. The first bucket of a dtype closes at `first_bucket_bytes` (small, so
// that the first all_reduce starts early in backward), later ones at `bucket_cap_bytes`. A parameter
// larger than the limit therefore gets a bucket of its own; parameters are never split.
#ifndef TINYDDP_DIST_DDP_BUCKET_ASSIGNMENT_H_
#define TINYDDP_DIST_DDP_BUCKET_ASSIGNMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "tensor/dtype.h"

namespace tinyddp::dist {

/// What the assignment needs to know about one parameter.
struct BucketParam {
  int64_t bytes = 0;  // numel * dtype size of its gradient
  DType dtype = DType::kFloat32;
};

/// Groups the parameters into buckets. `order` lists parameter indices (into `params`) in expected
/// gradient-ready order; it must be a permutation of 0..params.size()-1. Returns the buckets in launch
/// order, each a list of parameter indices in `order`'s order. Buckets are sorted by the position of
/// their last parameter in `order`, i.e. by the moment they become ready (with one dtype that is simply
/// the order they were closed in). Preconditions: both limits > 0.
std::vector<std::vector<size_t>> AssignBuckets(absl::Span<const BucketParam> params, absl::Span<const size_t> order,
                                               int64_t first_bucket_bytes, int64_t bucket_cap_bytes);

/// The initial order: reverse registration order (n-1, ..., 1, 0), the order backward produces the
/// gradients of a model whose layers run in registration order.
std::vector<size_t> ReverseOrder(size_t num_params);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_BUCKET_ASSIGNMENT_H_
