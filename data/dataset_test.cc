// TensorDataset: validation on creation, row views, and batch gathers (its fast memcpy path and the
// Dataset default that goes through Get) on random data with an odd row width.
#include "data/dataset.h"

#include <random>

#include "gtest/gtest.h"

namespace tinyddp::data {
namespace {

constexpr int64_t kN = 37, kD = 13, kClasses = 5;

TensorDataset RandomDataset(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(kN * kD);
  std::vector<int64_t> y(kN);
  for (float& v : x) v = normal(rng);
  for (int64_t& v : y) v = rng() % kClasses;
  absl::StatusOr<TensorDataset> ds =
      TensorDataset::Create(Tensor::FromVector(x, {kN, kD}), Tensor::FromVector(y, {kN}), kClasses);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return *ds;
}

// Goes through Get for every example: exercises Dataset::GetBatchInto's default.
class ViaGet : public Dataset {
 public:
  explicit ViaGet(const TensorDataset& inner) : inner_(inner) {}
  int64_t Size() const override { return inner_.Size(); }
  int64_t input_size() const override { return inner_.input_size(); }
  int64_t num_classes() const override { return inner_.num_classes(); }
  absl::StatusOr<Example> Get(int64_t i) const override { return inner_.Get(i); }

 private:
  const TensorDataset& inner_;
};

TEST(TensorDataset, GetReturnsTheRowAndLabel) {
  TensorDataset ds = RandomDataset(1);
  const std::vector<float> all = ds.inputs().ToVector<float>();
  absl::StatusOr<Example> e = ds.Get(17);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->input.shape(), Shape({kD}));
  EXPECT_EQ(e->input.ToVector<float>(), std::vector<float>(all.begin() + 17 * kD, all.begin() + 18 * kD));
  EXPECT_EQ(e->label, ds.labels().ToVector<int64_t>()[17]);
  EXPECT_EQ(ds.Get(kN).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ds.Get(-1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(TensorDataset, GetBatchGathersRowsInIndexOrderWithRepeats) {
  TensorDataset ds = RandomDataset(2);
  ViaGet via_get(ds);
  const std::vector<int64_t> indices = {36, 0, 5, 5, 21, 2, 35};
  const std::vector<float> all = ds.inputs().ToVector<float>();
  const std::vector<int64_t> labels = ds.labels().ToVector<int64_t>();
  for (const Dataset* d : {static_cast<const Dataset*>(&ds), static_cast<const Dataset*>(&via_get)}) {
    absl::StatusOr<Batch> b = d->GetBatch(indices);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(b->inputs.shape(), Shape({7, kD}));
    ASSERT_EQ(b->size(), 7);
    const std::vector<float> x = b->inputs.ToVector<float>();
    const std::vector<int64_t> y = b->labels.ToVector<int64_t>();
    for (size_t r = 0; r < indices.size(); ++r) {
      for (int64_t c = 0; c < kD; ++c) EXPECT_EQ(x[r * kD + c], all[indices[r] * kD + c]);
      EXPECT_EQ(y[r], labels[indices[r]]);
    }
  }
}

TEST(TensorDataset, GetBatchIntoFillsOnlyTheFirstRowsOfALargerBuffer) {
  TensorDataset ds = RandomDataset(3);
  Tensor x = Tensor::Full({8, kD}, -7.0);
  Tensor y = Tensor::Full({8}, -7.0, DType::kInt64);
  const std::vector<int64_t> indices = {4, 9, 30};
  ASSERT_TRUE(ds.GetBatchInto(indices, x, y).ok());
  EXPECT_EQ(y.ToVector<int64_t>()[2], ds.labels().ToVector<int64_t>()[30]);
  EXPECT_EQ(y.ToVector<int64_t>()[3], -7);
  EXPECT_EQ(x.ToVector<float>()[3 * kD], -7.0f);
}

TEST(TensorDataset, GetBatchReportsBadIndicesAndBuffers) {
  TensorDataset ds = RandomDataset(4);
  const std::vector<int64_t> bad = {1, kN};
  absl::StatusOr<Batch> b = ds.GetBatch(bad);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(b.status().message().find("index 37"), std::string::npos) << b.status();
  Tensor small = Tensor::Empty({1, kD});
  Tensor y = Tensor::Empty({4}, DType::kInt64);
  const std::vector<int64_t> two = {0, 1};
  EXPECT_EQ(ds.GetBatchInto(two, small, y).code(), absl::StatusCode::kInvalidArgument);
  Tensor wrong_width = Tensor::Empty({4, kD + 1});
  EXPECT_EQ(ds.GetBatchInto(two, wrong_width, y).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorDataset, CreateRejectsMismatchedOrOutOfRangeData) {
  Tensor x = Tensor::Zeros({3, 2});
  EXPECT_FALSE(TensorDataset::Create(x, Tensor::FromVector<int64_t>({0, 1}, {2}), 2).ok());     // 3 vs 2
  EXPECT_FALSE(TensorDataset::Create(x, Tensor::FromVector<int64_t>({0, 1, 2}, {3}), 2).ok());  // label 2
  EXPECT_FALSE(TensorDataset::Create(x, Tensor::FromVector<int64_t>({0, -1, 0}, {3}), 2).ok());
  EXPECT_FALSE(TensorDataset::Create(x, Tensor::FromVector<int32_t>({0, 1, 0}, {3}), 2).ok());  // int32
  EXPECT_FALSE(TensorDataset::Create(Tensor::Zeros({3, 2}, DType::kFloat64),
                                     Tensor::FromVector<int64_t>({0, 1, 0}, {3}), 2).ok());
  EXPECT_TRUE(TensorDataset::Create(x, Tensor::FromVector<int64_t>({0, 1, 1}, {3}), 2).ok());
}

}  // namespace
}  // namespace tinyddp::data
