// The check of exercise 6 (docs/exercises.md): RowParallelForward on 3 ranks, each holding its columns of the
// input and of the weight (25 input features: 9, 8 and 8 columns; then 3 features, one each). It wants the
// whole layer's output, x @ W^T + bias, on every rank, the same bits on each; exactly one collective, an
// AllReduce with SUM of the [rows, out] output; and, when the output is off, it says by how many biases.
//
// Tolerance: the ranks' three partial sums are added by the all_reduce, where one process adds the 25 terms in
// one loop: the same sum in another order, within a few float32 roundings (~1e-6 here). 1e-5 is allowed; a
// bias too many is 0.1 or more.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/exercises/collective_log.h"
#include "tests/exercises/tensor_parallel/row_parallel_forward.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;

constexpr double kTolerance = 1e-5;

// Columns [begin, end) of a [rows, cols] tensor, as a new [rows, end - begin] tensor.
Tensor Columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t rows = t.size(0), cols = t.size(1);
  const std::vector<float> all = t.ToVector<float>();
  std::vector<float> part;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = begin; j < end; ++j) part.push_back(all[i * cols + j]);
  }
  return Tensor::FromVector<float>(part, {rows, end - begin});
}

// How many times `bias` is in `got` beyond `product` (x @ W^T), if a whole number of biases explains it.
int BiasesIn(const Tensor& got, const Tensor& product, const Tensor& bias, int most) {
  const std::vector<float> g = got.ToVector<float>(), p = product.ToVector<float>(), b = bias.ToVector<float>();
  for (int m = 0; m <= most; ++m) {
    bool fits = true;
    for (size_t i = 0; i < g.size() && fits; ++i) fits = std::fabs(g[i] - (p[i] + m * b[i % b.size()])) <= kTolerance;
    if (fits) return m;
  }
  return -1;
}

void CheckLayer(dist::ProcessGroup& pg, CollectiveLog& log, int64_t rows, int64_t in, int64_t out) {
  const std::string layer =
      absl::StrCat("a layer of ", in, " -> ", out, " features, ", rows, " rows, on rank ", pg.rank());
  // The same whole layer and input on every rank, as if the layer before had left each rank its slice.
  Tensor x = Tensor::Empty({rows, in}), w = Tensor::Empty({out, in}), bias = Tensor::Empty({out});
  ops::UniformInit(x, -1, 1, /*seed=*/in, 0);
  ops::UniformInit(w, -1, 1, /*seed=*/in, rows * in);
  ops::UniformInit(bias, 0.5, 1, /*seed=*/in, rows * in + out * in);
  const int n = pg.size();
  const int64_t begin = pg.rank() * (in / n) + std::min<int64_t>(pg.rank(), in % n);
  const int64_t end = begin + in / n + (pg.rank() < in % n ? 1 : 0);
  const Tensor product = ops::Linear(x, w, Tensor()), want = ops::Linear(x, w, bias);

  log.Take();
  absl::StatusOr<Tensor> y = RowParallelForward(pg, Columns(x, begin, end), Columns(w, begin, end), bias);
  const std::vector<dist::CollectiveInfo> calls = log.Take();
  ASSERT_TRUE(y.ok()) << layer << ": " << y.status();
  ASSERT_EQ(y->shape(), want.shape()) << layer;

  const int biases = BiasesIn(*y, product, bias, n);
  if (biases != 1) {
    ADD_FAILURE() << layer << ": not the layer's output x @ W^T + bias; "
                  << (biases < 0
                          ? std::string("not even x @ W^T plus a whole number of biases")
                          : absl::StrCat("the bias was counted ", biases,
                                         " times: add it once, after the "
                                         "all_reduce (added to each rank's partial sum, it is summed with them)"));
  }
  ASSERT_EQ(calls.size(), 1u) << layer << ": wanted one AllReduce, got " << CollectiveLog::Describe(calls);
  EXPECT_EQ(calls[0].op, "AllReduce") << layer << ": " << CollectiveLog::Describe(calls);
  EXPECT_EQ(calls[0].signature, absl::StrCat("float32 [", rows, ", ", out, "], SUM"))
      << layer << ": sum the [rows, out] partial outputs, each rank's x_r @ W_r^T";

  // The same bits on every rank: the ranks go on from here as one.
  Tensor all = Tensor::Empty({n * y->numel()});
  ASSERT_TRUE(pg.AllGather(all, y->Flatten())->Wait().ok());
  const std::vector<float> mine = y->ToVector<float>(), every = all.ToVector<float>();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(std::vector<float>(every.begin() + r * mine.size(), every.begin() + (r + 1) * mine.size()), mine)
        << layer << ": rank " << r << " returned other bits";
  }
}

TEST(RowParallelForward, SumsThePartialOutputsOnceAndAddsTheBiasOnce) {
  dist::testing::RunOnRanks(3, [](const RankContext& ctx) {
    auto made = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(made.ok()) << made.status();
    std::shared_ptr<dist::ProcessGroup> pg(std::move(*made));
    auto log = std::make_shared<CollectiveLog>();
    pg->AddObserver(log);
    CheckLayer(*pg, *log, /*rows=*/5, /*in=*/25, /*out=*/37);  // 9, 8 and 8 columns
    CheckLayer(*pg, *log, /*rows=*/2, /*in=*/3, /*out=*/4);    // one column each
  });
}

}  // namespace
}  // namespace tinyddp::exercises
