// Checks exercise 2 (fp16_compress_hook.h) on real processes over Gloo: a bucket of odd length on 3
// ranks must come back as the mean of every rank's fp16-rounded gradients (not the exact float32 mean:
// then nothing was compressed), the same on every rank, and must have travelled as halves: an observer
// on the group (collective_log.h) sees one AllGather of int32 words, two halves each, and nothing else
// (rounding to fp16 and then all-reducing float32 gives the same numbers and saves no byte). The hook
// must also work inside DDP, where it gives the fp32 DDP's gradients to within fp16's precision.
//   ./bazelw test //tests/exercises/compress_hook:check             # your solution
//   ./bazelw test //tests/exercises/compress_hook:reference_check   # the reference (what CI runs)
//   ./bazelw test //tests/exercises/compress_hook:rejects_wrong_solution   # wrong/ must fail it
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "tests/exercises/collective_log.h"
#include "tests/exercises/compress_hook/fp16.h"
#include "tests/exercises/compress_hook/fp16_compress_hook.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

std::vector<float> GradientsOf(int rank, int64_t n) {
  std::mt19937 rng(77 + rank);
  std::uniform_real_distribution<float> value(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

TEST(Fp16Helpers, RoundToNearestEvenAndBack) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.5f), 0xc100);
  EXPECT_EQ(FloatToHalf(65504.f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.f), 0x7c00);                // halfway past the largest half: infinity
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);     // a tie: to the even neighbour, 1.0
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);     // a tie: to the even neighbour, up
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  for (uint32_t h = 0; h < 0x7c00; h += 7) EXPECT_EQ(FloatToHalf(HalfToFloat(h)), h) << h;
}

TEST(Fp16CompressHook, AveragesEveryRanksHalvesAndOnlyThose) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    const int64_t n = 1001;
    dist::GradBucket bucket;
    bucket.index = 0;
    bucket.numel = n;
    bucket.buffer = Tensor::FromVector(GradientsOf(ctx.rank, n), {n});
    bucket.gradients = {bucket.buffer.Rows(0, 400), bucket.buffer.Rows(400, 1000), bucket.buffer.Rows(1000, n)};
    bucket.is_last = true;
    dist::CommHook hook = Fp16CompressHook();
    ASSERT_TRUE(hook.run) << "Fp16CompressHook returned a hook without run";
    auto log = std::make_shared<CollectiveLog>();
    (*pg)->AddObserver(log);
    dist::CommFuture future = hook.run(**pg, bucket);
    ASSERT_NE(future.work, nullptr);
    const absl::Status done = future.Complete();
    ASSERT_TRUE(done.ok()) << done;
    // What went on the wire: one all-gather of this rank's halves, packed two per int32 word.
    const std::vector<dist::CollectiveInfo> used = log->Take();
    ASSERT_EQ(CollectiveLog::Ops(used), std::vector<std::string>{"AllGather"})
        << "the hook issued " << CollectiveLog::Describe(used) << "; it should send the bucket with exactly one "
        << "AllGather of the fp16 bits (an all_reduce of float32 sends four bytes per gradient, however they "
        << "were rounded)";
    EXPECT_EQ(used[0].dtype, "int32") << "pack the halves two per int32 word; the AllGather carried "
                                      << used[0].signature;
    EXPECT_EQ(used[0].numel, (n + 1) / 2) << "a bucket of " << n << " gradients is " << (n + 1) / 2
                                          << " words of two halves; the AllGather carried " << used[0].signature;
    const std::vector<float> got = bucket.buffer.ToVector<float>();
    int exact_fp32 = 0;
    for (int64_t i = 0; i < n; ++i) {
      double halves = 0, floats = 0;
      for (int r = 0; r < ctx.world_size; ++r) {
        halves += HalfToFloat(FloatToHalf(GradientsOf(r, n)[i]));
        floats += GradientsOf(r, n)[i];
      }
      halves /= ctx.world_size;
      floats /= ctx.world_size;
      if (std::fabs(got[i] - floats) <= 1e-6 * std::fabs(floats)) ++exact_fp32;
      ASSERT_NEAR(got[i], halves, 1e-6 * std::fabs(halves) + 1e-9)
          << "element " << i << " on rank " << ctx.rank << ": expected the mean of the ranks' fp16-rounded "
          << "gradients (" << halves << "); the float32 mean is " << floats;
    }
    EXPECT_LT(exact_fp32, n / 10) << exact_fp32 << " of " << n << " elements are the exact float32 mean: the "
                                  << "gradients were not sent in fp16";
    Tensor all = Tensor::Empty({n * ctx.world_size});
    ASSERT_TRUE((*pg)->AllGather(all, bucket.buffer)->Wait().ok());
    const std::vector<float> every = all.ToVector<float>();
    for (int r = 0; r < ctx.world_size; ++r) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(every[r * n + i], got[i]) << "rank " << r << ", element " << i;
    }
    EXPECT_NE(std::string(hook.PathOf(**pg, bucket)).find("fp16"), std::string::npos)
        << "name the hook's path (hook.path), e.g. \"all_gather, fp16\"";
  });
}

// One backward of an MLP through DDP with `hook` (empty: DDP's fp32 default); the gradients, flattened.
std::vector<float> DdpGradients(std::shared_ptr<dist::ProcessGroup> pg, int rank, dist::CommHook hook) {
  auto model = nn::MLP({13, 17, 6}, {.seed = 5});
  dist::DdpOptions options;
  options.comm_hook = std::move(hook);
  auto ddp = dist::DistributedDataParallel::Create(*model, pg, options);
  EXPECT_TRUE(ddp.ok()) << ddp.status();
  std::vector<float> x(7 * 13);
  std::mt19937 rng(rank);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  const Tensor labels = Tensor::FromVector<int64_t>({0, 5, 2, 3, 1, 4, rank}, {7});
  autograd::Backward(
      autograd::CrossEntropy((*ddp)->Forward(autograd::Variable(Tensor::FromVector(x, {7, 13}))), labels));
  std::vector<float> grads;
  for (const autograd::Variable& p : model->Parameters()) {
    for (float g : p.grad().ToVector<float>()) grads.push_back(g);
  }
  return grads;
}

TEST(Fp16CompressHook, TrainsInsideDdpToWithinFp16OfTheFloat32Average) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto created = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(created.ok()) << created.status();
    std::shared_ptr<dist::ProcessGroup> pg = std::move(*created);
    const std::vector<float> fp32 = DdpGradients(pg, ctx.rank, {});
    const std::vector<float> fp16 = DdpGradients(pg, ctx.rank, Fp16CompressHook());
    ASSERT_EQ(fp16.size(), fp32.size());
    float largest = 0;
    for (float g : fp32) largest = std::max(largest, std::fabs(g));
    int differ = 0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      EXPECT_NEAR(fp16[i], fp32[i], 1e-3 * largest) << "gradient element " << i;
      differ += fp16[i] != fp32[i];
    }
    EXPECT_GT(differ, 0) << "DDP's gradients came out exactly as with float32: the hook compressed nothing";
    Tensor mine = Tensor::FromVector(fp16, {static_cast<int64_t>(fp16.size())});
    Tensor both = Tensor::Empty({2 * mine.numel()});
    ASSERT_TRUE(pg->AllGather(both, mine)->Wait().ok());
    const std::vector<float> every = both.ToVector<float>();
    for (size_t i = 0; i < fp16.size(); ++i) ASSERT_EQ(every[i], every[fp16.size() + i]) << "ranks disagree";
  });
}

}  // namespace
}  // namespace tinyddp::exercises
