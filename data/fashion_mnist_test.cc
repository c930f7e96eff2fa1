// The real Fashion-MNIST files from Debian's dataset-fashion-mnist, when installed: sizes, pixel range,
// class balance and the first labels published with the dataset. Skips with the reason otherwise.
#include "data/fashion_mnist.h"

#include <sys/stat.h>

#include <algorithm>

#include "gtest/gtest.h"

namespace tinyddp::data {
namespace {

bool Installed() {
  struct stat st;
  return ::stat((std::string(kDefaultFashionMnistDir) + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

TEST(FashionMnist, RealTrainAndTestSplitsHaveTheirPublishedShapeRangeAndBalance) {
  if (!Installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed in " << kDefaultFashionMnistDir;
  for (const auto& [split, n] : {std::pair<const char*, int64_t>{"train", 60000}, {"test", 10000}}) {
    absl::StatusOr<TensorDataset> ds = LoadFashionMnist("", split);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds->inputs().shape(), Shape({n, 784}));
    EXPECT_EQ(ds->labels().shape(), Shape({n}));
    const std::vector<float> x = ds->inputs().ToVector<float>();
    const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
    double mean = 0;
    for (float v : x) mean += v;
    mean /= x.size();
    EXPECT_NEAR(mean, 0.286, 0.01) << split;  // the well-known Fashion-MNIST pixel mean
    std::vector<int64_t> per_class(10, 0);
    for (int64_t y : ds->labels().ToVector<int64_t>()) ++per_class[y];
    for (int64_t c : per_class) EXPECT_EQ(c, n / 10) << split;  // exactly balanced
  }
}

TEST(FashionMnist, FirstTrainingExampleIsAnAnkleBoot) {
  if (!Installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed in " << kDefaultFashionMnistDir;
  absl::StatusOr<TensorDataset> ds = LoadFashionMnist(kDefaultFashionMnistDir, "train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  const std::vector<int64_t> y = ds->labels().ToVector<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(y.begin(), y.begin() + 4), (std::vector<int64_t>{9, 0, 0, 3}));
}

}  // namespace
}  // namespace tinyddp::data
