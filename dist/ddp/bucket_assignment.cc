// Bucket assignment by size (dist/ddp/bucket_assignment.h).
#include "dist/ddp/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <utility>

#include "base/check.h"

namespace tinyddp::dist {

std::vector<std::vector<size_t>> AssignBuckets(absl::Span<const BucketParam> params, absl::Span<const size_t> order,
                                               int64_t first_bucket_bytes, int64_t bucket_cap_bytes) {
  TINYDDP_CHECK_OP(first_bucket_bytes > 0 && bucket_cap_bytes > 0, "AssignBuckets",
                   "bucket size limits must be positive, got first_bucket_bytes=", first_bucket_bytes,
                   " bucket_cap_bytes=", bucket_cap_bytes);
  TINYDDP_CHECK_OP(order.size() == params.size(), "AssignBuckets", "order has ", order.size(),
                   " entries for ", params.size(), " parameters; hint: it must list every parameter once");
  std::vector<bool> seen(params.size(), false);
  for (size_t index : order) {
    TINYDDP_CHECK_OP(index < params.size() && !seen[index], "AssignBuckets", "order is not a permutation: ",
                     index, (index < params.size() ? " appears twice" : " is out of range"));
    seen[index] = true;
  }

  // One open bucket per dtype (a flat buffer has one dtype), each with its own limit: the first bucket
  // of a dtype is capped at first_bucket_bytes, the later ones at bucket_cap_bytes.
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    bool closed_one = false;
  };
  std::map<DType, Open> open;
  // (position in `order` of the bucket's last parameter, bucket)
  std::vector<std::pair<size_t, std::vector<size_t>>> closed;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const size_t index = order[pos];
    Open& bucket = open[params[index].dtype];
    bucket.params.push_back(index);
    bucket.bytes += params[index].bytes;
    const int64_t limit = bucket.closed_one ? bucket_cap_bytes : first_bucket_bytes;
    if (bucket.bytes >= limit) {
      closed.emplace_back(pos, std::move(bucket.params));
      bucket = Open{{}, 0, /*closed_one=*/true};
    }
  }
  // The partly filled buckets left at the end become ready with their last parameter.
  std::vector<size_t> position(params.size());
  for (size_t pos = 0; pos < order.size(); ++pos) position[order[pos]] = pos;
  for (auto& [dtype, bucket] : open) {
    if (!bucket.params.empty()) closed.emplace_back(position[bucket.params.back()], std::move(bucket.params));
  }
  std::sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  std::vector<std::vector<size_t>> buckets;
  buckets.reserve(closed.size());
  for (auto& [pos, members] : closed) buckets.push_back(std::move(members));
  return buckets;
}

std::vector<size_t> ReverseOrder(size_t num_params) {
  std::vector<size_t> order(num_params);
  for (size_t i = 0; i < num_params; ++i) order[i] = num_params - 1 - i;
  return order;
}

}  // namespace tinyddp::dist
