#include "dist/elastic/in_place/min_replicas.h"

#include "gtest/gtest.h"

namespace tinyddp::dist::in_place {
namespace {

MinReplicasRequest Plain(int64_t k) { return {.min_replicas = k, .replicas = 4, .backend = "gloo"}; }

void ExpectRefused(MinReplicasRequest r, const char* says) {
  absl::Status s = CheckMinReplicas(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(says), absl::string_view::npos) << s;
}

TEST(MinReplicas, OffAndPlainDataParallelJobsPass) {
  EXPECT_TRUE(CheckMinReplicas({}).ok());
  EXPECT_TRUE(CheckMinReplicas(Plain(1)).ok());
  EXPECT_TRUE(CheckMinReplicas(Plain(4)).ok());
}

TEST(MinReplicas, RefusesBadCountsAndUnsupportedCombinationsSayingWhy) {
  ExpectRefused(Plain(-1), "at least 1");
  ExpectRefused(Plain(5), "only 4");
  auto with = [](auto change) {
    MinReplicasRequest r = Plain(2);
    change(r);
    return r;
  };
  ExpectRefused(with([](auto& r) { r.tp = 2; }), "--tp");
  ExpectRefused(with([](auto& r) { r.pp = 2; }), "--pp");
  ExpectRefused(with([](auto& r) { r.microbatches = 4; }), "--microbatches");
  ExpectRefused(with([](auto& r) { r.zero = 3; }), "--zero=3");
  ExpectRefused(with([](auto& r) { r.join = true; }), "--join");
  ExpectRefused(with([](auto& r) { r.backend = "nccl"; }), "ncclCommShrink");
}

}  // namespace
}  // namespace tinyddp::dist::in_place
