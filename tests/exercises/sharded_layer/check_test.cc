// The check of exercise 5 (docs/exercises.md): ShardedLinearForward on 3 ranks, with a layer whose size does
// not divide into 3 blocks. It wants plain ops::Linear's output, bit for bit; exactly one AllGather of the whole
// layer; and, measured by the host allocator (GetHostMemoryStats, tensor/storage.h), nothing but the output
// still alive when the call returns, twice in a row.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tensor/storage.h"
#include "tests/exercises/collective_log.h"
#include "tests/exercises/sharded_layer/sharded_layer.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;

TEST(ShardedLayer, GathersOnceComputesTheLayerAndKeepsNothingOfIt) {
  dist::testing::RunOnRanks(3, [](const RankContext& ctx) {
    auto made = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(made.ok()) << made.status();
    std::shared_ptr<dist::ProcessGroup> pg(std::move(*made));
    auto log = std::make_shared<CollectiveLog>();
    pg->AddObserver(log);

    // A layer of 37 x 24 + 37 = 925 elements: blocks of 309 on 3 ranks, the last 2 elements padding.
    const int64_t out = 37, in = 24, numel = out * in + out;
    const int64_t block = (numel + ctx.world_size - 1) / ctx.world_size;
    Tensor w = Tensor::Empty({out, in}), b = Tensor::Empty({out}), x = Tensor::Empty({5, in});
    ops::UniformInit(w, -1, 1, /*seed=*/7, 0);  // the same layer on every rank, as if it had been sharded
    ops::UniformInit(b, -1, 1, /*seed=*/7, out * in);
    ops::NormalInit(x, 0, 1, /*seed=*/100 + ctx.rank);
    Tensor flat = Tensor::Zeros({ctx.world_size * block});
    Tensor into_w = flat.Rows(0, out * in), into_b = flat.Rows(out * in, numel);
    ops::CopyInto(into_w, w.Flatten());
    ops::CopyInto(into_b, b);
    const Tensor shard = flat.Rows(ctx.rank * block, (ctx.rank + 1) * block).Clone();
    const Tensor want = ops::Linear(x, w, b);
    flat = Tensor();
    into_w = into_b = Tensor();

    for (int call = 1; call <= 2; ++call) {
      log->Take();
      const int64_t before = GetHostMemoryStats().live_bytes;
      absl::StatusOr<Tensor> y = ShardedLinearForward(*pg, shard, x, out, in);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_TRUE(pg->Barrier()->Wait().ok());  // Gloo's thread has let go of the gather's tensors
      const int64_t kept = GetHostMemoryStats().live_bytes - before - static_cast<int64_t>(y->nbytes());
      const std::vector<dist::CollectiveInfo> calls = log->Take();
      const std::string when = absl::StrCat("forward ", call, " on rank ", ctx.rank);
      ASSERT_EQ(y->shape(), want.shape()) << when;
      EXPECT_EQ(std::memcmp(y->data_ptr(), want.data_ptr(), want.nbytes()), 0) << when << ": not ops::Linear's output";
      ASSERT_EQ(calls.size(), 2u) << when << ": wanted one AllGather (and the check's Barrier), got "
                                  << CollectiveLog::Describe(calls);
      EXPECT_EQ(calls[0].op, "AllGather")
          << when << ": the solution issued " << CollectiveLog::Describe(calls) << ". Gather the layer with one "
          << "AllGather of every rank's block: "
          << (calls[0].op == "AllReduce"
                  ? "an AllReduce of a zero-padded layer gives the same layer, but a ring all_reduce moves "
                    "2(N-1)/N of the layer per rank (a reduce-scatter, then an all-gather), twice the (N-1)/N an "
                    "all-gather moves, to add zeros"
                  : "each rank receives the (N-1)/N of the layer it lacks, and nothing more");
      EXPECT_EQ(calls[0].signature, absl::StrCat("float32 [", ctx.world_size * block, "] <- float32 [", block, "]"))
          << when << ": gather the whole layer, every rank's block";
      EXPECT_LE(kept, 0) << when << ": the gathered layer is still alive after the forward: " << kept
                         << " bytes more than the output (a layer is " << 4 * ctx.world_size * block
                         << "); ZeRO-3 saves memory only if the layer goes again";
    }
  });
}

}  // namespace
}  // namespace tinyddp::exercises
