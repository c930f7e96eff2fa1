// The pure pieces of the tensor-parallel wing, on one process: who owns which rows and columns (uneven
// sizes: the first ranks get one more), slicing a shard out and writing it back by rows and by columns, the
// plan's pairing rule for any number of Linear layers, its refusals, and the table rank 0 prints.
#include "dist/parallel/tensor/mlp_plan.h"

#include <string>
#include <vector>

#include "dist/parallel/tensor/shard_range.h"
#include "gtest/gtest.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "tensor/ops.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ShardOf, CutsIntoConsecutiveRangesTheFirstRanksGettingOneMore) {
  // 7 over 3: 3, 2, 2; 8 over 4: 2 each; 5 over 5: 1 each.
  const std::vector<std::vector<int64_t>> sizes = {{3, 2, 2}, {2, 2, 2, 2}, {1, 1, 1, 1, 1}};
  const std::vector<std::pair<int64_t, int>> cases = {{7, 3}, {8, 4}, {5, 5}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto [n, tp] = cases[c];
    int64_t next = 0;
    for (int r = 0; r < tp; ++r) {
      const ShardRange range = ShardOf(n, tp, r);
      EXPECT_EQ(range.begin, next) << n << " over " << tp << ", rank " << r;
      EXPECT_EQ(range.size(), sizes[c][r]) << n << " over " << tp << ", rank " << r;
      next = range.end;
    }
    EXPECT_EQ(next, n);
  }
}

TEST(SliceShard, RowsAndColumnsRoundTripIntoTheWholeTensor) {
  Tensor whole = Tensor::Empty({5, 7});
  ops::UniformInit(whole, -1, 1, /*seed=*/3);
  const std::vector<float> values = whole.ToVector<float>();
  for (Split split : {Split::kRows, Split::kColumns}) {
    Tensor rebuilt = Tensor::Zeros({5, 7});
    const int64_t length = SplitLength(whole.shape(), split);
    for (int r = 0; r < 3; ++r) {
      const ShardRange range = ShardOf(length, 3, r);
      const Tensor shard = SliceShard(whole, split, range);
      ASSERT_EQ(shard.shape(), ShardShape(whole.shape(), split, range));
      const std::vector<float> got = shard.ToVector<float>();
      for (int64_t i = 0; i < shard.size(0); ++i) {
        for (int64_t j = 0; j < shard.size(1); ++j) {
          const int64_t row = split == Split::kRows ? range.begin + i : i;
          const int64_t col = split == Split::kColumns ? range.begin + j : j;
          ASSERT_EQ(got[i * shard.size(1) + j], values[row * 7 + col]) << SplitName(split) << " rank " << r;
        }
      }
      WriteShard(rebuilt, shard, split, range);
    }
    EXPECT_EQ(rebuilt.ToVector<float>(), values) << SplitName(split);
  }
}

std::vector<LayerRole> Roles(const TensorParallelPlan& plan) {
  std::vector<LayerRole> roles;
  for (const PlannedLinear& l : plan.linears) roles.push_back(l.role);
  return roles;
}

TEST(TensorParallelPlan, PairsLinearsTwoByTwoAndKeepsAnOddLastOneWhole) {
  using R = LayerRole;
  auto plan = TensorParallelPlan::Make(*nn::MLP({784, 100, 10}), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Roles(*plan), (std::vector<R>{R::kColumn, R::kRow}));
  plan = TensorParallelPlan::Make(*nn::MLP({784, 64, 48, 10}), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Roles(*plan), (std::vector<R>{R::kColumn, R::kRow, R::kReplicated}));
  plan = TensorParallelPlan::Make(*nn::MLP({784, 10}), 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Roles(*plan), (std::vector<R>{R::kReplicated}));
  plan = TensorParallelPlan::Make(*nn::MLP({13, 7, 9, 11, 5}, {.activation = nn::Activation::kGELU}), 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Roles(*plan), (std::vector<R>{R::kColumn, R::kRow, R::kColumn, R::kRow}));
  // The parameters in the model's order, each split as its layer's role says.
  const std::vector<Split> splits = {Split::kRows, Split::kRows, Split::kColumns, Split::kReplicated,
                                     Split::kRows, Split::kRows, Split::kColumns, Split::kReplicated};
  ASSERT_EQ(plan->params.size(), splits.size());
  for (size_t i = 0; i < splits.size(); ++i) EXPECT_EQ(plan->params[i].split, splits[i]) << plan->params[i].name;
  EXPECT_EQ(plan->params[2].name, "2.weight");
  EXPECT_EQ(plan->TotalParameters(), nn::MLP({13, 7, 9, 11, 5})->NumParameters());
  // Hidden 7 over 3: rank 0 holds rows [0, 3) of layer 0 and columns [0, 3) of layer 2.
  EXPECT_EQ(ShardShape(plan->params[0].full_shape, Split::kRows, plan->RangeOf(plan->params[0], 0)), (Shape{3, 13}));
  EXPECT_EQ(ShardShape(plan->params[2].full_shape, Split::kColumns, plan->RangeOf(plan->params[2], 2)), (Shape{9, 2}));
}

TEST(TensorParallelPlan, RefusesWhatItCannotSplitAndSaysWhatToChange) {
  // A hidden layer narrower than the group: which layers, and what to do.
  auto narrow = TensorParallelPlan::Make(*nn::MLP({13, 3, 5}), 4);
  ASSERT_TRUE(absl::IsInvalidArgument(narrow.status())) << narrow.status();
  EXPECT_TRUE(Has(std::string(narrow.status().message()), "splits the 3 hidden features between layer 0"))
      << narrow.status();
  EXPECT_TRUE(Has(std::string(narrow.status().message()), "use a tp size of at most 3")) << narrow.status();
  // Not an MLP: two Linear layers with nothing between them, a nested Sequential.
  nn::Sequential back_to_back;
  back_to_back.Append(std::make_shared<nn::Linear>(4, 6)).Append(std::make_shared<nn::Linear>(6, 2));
  const absl::Status a = TensorParallelPlan::Make(back_to_back, 2).status();
  EXPECT_TRUE(absl::IsInvalidArgument(a)) << a;
  EXPECT_TRUE(Has(std::string(a.message()), "does not begin and end with a Linear layer")) << a;
  nn::Sequential nested;
  nested.Append(std::make_shared<nn::Linear>(4, 6)).Append(nn::MLP({6, 6})).Append(std::make_shared<nn::Linear>(6, 2));
  const absl::Status b = TensorParallelPlan::Make(nested, 2).status();
  EXPECT_TRUE(Has(std::string(b.message()), "child 1 is Sequential(")) << b;
  EXPECT_TRUE(Has(std::string(b.message()), "where an activation belongs")) << b;
  EXPECT_TRUE(absl::IsInvalidArgument(TensorParallelPlan::Make(*nn::MLP({4, 2}), 0).status()));
}

TEST(TensorParallelPlan, DescribesShardsAndTheBytesEachPairAllReduces) {
  auto plan = TensorParallelPlan::Make(*nn::MLP({13, 7, 9, 11, 5}), 2);
  ASSERT_TRUE(plan.ok());
  const std::string table = plan->Describe(/*batch_size=*/6);
  EXPECT_TRUE(Has(table, "tensor parallelism over 2 rank(s): 4 Linear layer(s), 2 column -> row pair(s)")) << table;
  EXPECT_TRUE(Has(table, "[4, 13] [3, 13]")) << table;  // hidden 7: uneven
  EXPECT_TRUE(Has(table, "[9, 4] [9, 3]")) << table;
  EXPECT_TRUE(Has(table, "[9] whole, added after the sum")) << table;
  // Pair 0 -> 2: forward sums layer 2's output, [6, 9] float32; its input is the data: no backward sum.
  EXPECT_TRUE(Has(table, "pair 0 -> 2: forward: layer 2's output [6, 9], 216 bytes; backward: none")) << table;
  // Pair 4 -> 6: its input is layer 2's output, which needs a gradient: [6, 9] summed in backward.
  EXPECT_TRUE(Has(table, "backward: layer 4's input gradient [6, 9], 216 bytes")) << table;
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace tinyddp::dist::tensor_parallel
