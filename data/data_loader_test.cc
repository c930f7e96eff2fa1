// The CPU DataLoader: batches hold exactly the sampler's indices in order, drop_last, the prefetch depth
// never changes what comes out, held batches stay intact, buffers are reused in the steady state,
// stopping early never hangs, and worker errors and timeouts reach the consumer as statuses.
#include "data/data_loader.h"

#include <condition_variable>
#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tinyddp::data {
namespace {

constexpr int64_t kN = 103, kD = 7, kClasses = 6;

std::shared_ptr<TensorDataset> RandomDataset() {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-3, 3);
  std::vector<float> x(kN * kD);
  std::vector<int64_t> y(kN);
  for (float& v : x) v = uniform(rng);
  for (int64_t& v : y) v = rng() % kClasses;
  auto ds = TensorDataset::Create(Tensor::FromVector(x, {kN, kD}), Tensor::FromVector(y, {kN}), kClasses);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return std::make_shared<TensorDataset>(*ds);
}

DistributedSampler Sampler(int64_t n, int64_t replicas, int64_t rank, bool shuffle) {
  auto s = DistributedSampler::Create(n, {.num_replicas = replicas, .rank = rank, .shuffle = shuffle, .seed = 3});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::unique_ptr<DataLoader> Loader(std::shared_ptr<const Dataset> ds, DistributedSampler sampler,
                                   DataLoaderOptions options) {
  auto loader = DataLoader::Create(std::move(ds), std::move(sampler), options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return *std::move(loader);
}

// A batch as plain vectors, so batches can be compared after their tensors are gone.
struct Plain {
  std::vector<float> x;
  std::vector<int64_t> y;
  bool operator==(const Plain& o) const { return x == o.x && y == o.y; }
};

Plain ToPlain(const Batch& b) { return {b.inputs.ToVector<float>(), b.labels.ToVector<int64_t>()}; }

// What batch `k` must hold: the dataset rows at sampler indices [k*B, k*B + rows).
Plain Expected(const TensorDataset& ds, const std::vector<int64_t>& indices, int64_t k, int64_t batch_size) {
  const std::vector<float> x = ds.inputs().ToVector<float>();
  const std::vector<int64_t> y = ds.labels().ToVector<int64_t>();
  Plain p;
  for (int64_t i = k * batch_size; i < std::min<int64_t>((k + 1) * batch_size, indices.size()); ++i) {
    p.x.insert(p.x.end(), x.begin() + indices[i] * kD, x.begin() + (indices[i] + 1) * kD);
    p.y.push_back(y[indices[i]]);
  }
  return p;
}

std::vector<Plain> Epoch(DataLoader& loader, int64_t epoch) {
  std::vector<Plain> out;
  for (loader.Reset(epoch); std::optional<Batch> b = loader.Next();) out.push_back(ToPlain(*b));
  EXPECT_TRUE(loader.status().ok()) << loader.status();
  return out;
}

TEST(DataLoader, BatchesHoldTheSamplersIndicesInOrder) {
  auto ds = RandomDataset();
  for (int64_t epoch : {0, 1, 2}) {
    DistributedSampler sampler = Sampler(kN, 2, 1, /*shuffle=*/true);
    sampler.SetEpoch(epoch);
    const std::vector<int64_t> indices = sampler.Indices();  // 52 of them
    auto loader = Loader(ds, sampler, {.batch_size = 10});
    const std::vector<Plain> got = Epoch(*loader, epoch);
    ASSERT_EQ(got.size(), 6u);
    EXPECT_EQ(loader->num_batches(), 6);
    for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(got[k], Expected(*ds, indices, k, 10)) << "batch " << k;
    EXPECT_EQ(got.back().y.size(), 2u);  // 52 = 5 * 10 + 2
  }
}

TEST(DataLoader, DropLastDropsOnlyTheShortBatch) {
  auto ds = RandomDataset();
  DistributedSampler sampler = Sampler(kN, 1, 0, /*shuffle=*/false);
  auto loader = Loader(ds, sampler, {.batch_size = 25, .drop_last = true});
  const std::vector<Plain> got = Epoch(*loader, 0);
  ASSERT_EQ(got.size(), 4u);  // 103 = 4 * 25 + 3
  EXPECT_EQ(loader->num_batches(), 4);
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(got[k], Expected(*ds, sampler.Indices(), k, 25));
}

TEST(DataLoader, PrefetchDepthsOneToFourProduceIdenticalBatches) {
  auto ds = RandomDataset();
  std::vector<std::vector<Plain>> runs;
  for (int depth = 1; depth <= 4; ++depth) {
    auto loader = Loader(ds, Sampler(kN, 3, 2, true), {.batch_size = 4, .prefetch_depth = depth});
    std::vector<Plain> all = Epoch(*loader, 7);
    std::vector<Plain> next_epoch = Epoch(*loader, 8);
    all.insert(all.end(), next_epoch.begin(), next_epoch.end());
    runs.push_back(std::move(all));
  }
  ASSERT_EQ(runs[0].size(), 18u);  // 2 epochs x ceil(35 / 4)
  for (int depth = 2; depth <= 4; ++depth) EXPECT_EQ(runs[depth - 1], runs[0]) << "depth " << depth;
  EXPECT_NE(std::vector<Plain>(runs[0].begin(), runs[0].begin() + 9),
            std::vector<Plain>(runs[0].begin() + 9, runs[0].end()))
      << "epochs 7 and 8 must be shuffled differently";
}

TEST(DataLoader, HeldBatchesStayIntactAndOutliveTheLoader) {
  auto ds = RandomDataset();
  DistributedSampler sampler = Sampler(kN, 1, 0, true);
  std::vector<Batch> held;
  {
    auto loader = Loader(ds, sampler, {.batch_size = 8, .prefetch_depth = 1});
    for (loader->Reset(0); std::optional<Batch> b = loader->Next();) held.push_back(*b);
    EXPECT_EQ(loader->num_buffers_created(), 13);  // every batch held: the pool grew instead of blocking
  }
  ASSERT_EQ(held.size(), 13u);
  for (int64_t k = 0; k < 13; ++k) EXPECT_EQ(ToPlain(held[k]), Expected(*ds, sampler.Indices(), k, 8));
}

TEST(DataLoader, SteadyStateReusesItsBuffers) {
  auto ds = RandomDataset();
  auto loader = Loader(ds, Sampler(kN, 1, 0, true), {.batch_size = 5, .prefetch_depth = 2});
  for (int64_t epoch = 0; epoch < 4; ++epoch) Epoch(*loader, epoch);  // 4 x 21 batches
  // At most: two queued, one being filled, one held by the consumer.
  EXPECT_LE(loader->num_buffers_created(), 2 + 2);
}

TEST(DataLoader, StoppingEarlyNeverHangs) {
  auto ds = RandomDataset();
  for (int depth : {1, 2, 4}) {
    auto loader = Loader(ds, Sampler(kN, 1, 0, true), {.batch_size = 3, .prefetch_depth = depth});
    loader->Reset(0);
    ASSERT_TRUE(loader->Next().has_value());
    loader->Reset(1);  // abandons epoch 0 with a full queue and a blocked worker
    std::optional<Batch> first = loader->Next();
    ASSERT_TRUE(first.has_value());
    DistributedSampler s = Sampler(kN, 1, 0, true);
    s.SetEpoch(1);
    EXPECT_EQ(ToPlain(*first), Expected(*ds, s.Indices(), 0, 3)) << "Reset restarts at batch 0 of the new epoch";
    loader->Reset(2);  // then destroyed without reading anything
  }
  auto never_started = Loader(ds, Sampler(kN, 1, 0, true), {});
}

// Fails for batches containing `bad_index`, as a dataset on a disk might.
class FailingDataset : public Dataset {
 public:
  FailingDataset(std::shared_ptr<TensorDataset> inner, int64_t bad_index) : inner_(inner), bad_(bad_index) {}
  int64_t Size() const override { return inner_->Size(); }
  int64_t input_size() const override { return inner_->input_size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  absl::StatusOr<Example> Get(int64_t i) const override {
    if (i == bad_) return absl::DataLossError(absl::StrCat("example ", i, " is unreadable"));
    return inner_->Get(i);
  }

 private:
  std::shared_ptr<TensorDataset> inner_;
  int64_t bad_;
};

TEST(DataLoader, AWorkerErrorArrivesAfterTheBatchesBeforeIt) {
  auto ds = RandomDataset();
  auto failing = std::make_shared<FailingDataset>(ds, 42);
  auto loader = Loader(failing, Sampler(kN, 1, 0, /*shuffle=*/false), {.batch_size = 10, .prefetch_depth = 3});
  loader->Reset(0);
  int good = 0;
  while (std::optional<Batch> b = loader->Next()) ++good;
  EXPECT_EQ(good, 4);  // batches 0..3 cover indices 0..39; batch 4 holds index 42
  EXPECT_EQ(loader->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(loader->status().message().find("batch 4"), std::string::npos) << loader->status();
  EXPECT_NE(loader->status().message().find("example 42 is unreadable"), std::string::npos) << loader->status();
  EXPECT_FALSE(loader->Next().has_value());
  loader->Reset(1);  // a new epoch starts clean
  EXPECT_TRUE(loader->status().ok());
  EXPECT_TRUE(loader->Next().has_value());
}

// Blocks in GetBatchInto until released: a stuck disk or network.
class BlockingDataset : public Dataset {
 public:
  explicit BlockingDataset(std::shared_ptr<TensorDataset> inner) : inner_(inner) {}
  int64_t Size() const override { return inner_->Size(); }
  int64_t input_size() const override { return inner_->input_size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  absl::StatusOr<Example> Get(int64_t i) const override { return inner_->Get(i); }
  absl::Status GetBatchInto(absl::Span<const int64_t> idx, Tensor& x, Tensor& y) const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return released_; });
    return inner_->GetBatchInto(idx, x, y);
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::shared_ptr<TensorDataset> inner_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool released_ = false;
};

TEST(DataLoader, NextTimesOutWithAStatusWhenTheDatasetIsStuck) {
  auto blocking = std::make_shared<BlockingDataset>(RandomDataset());
  auto loader = Loader(blocking, Sampler(kN, 1, 0, true), {.batch_size = 4, .timeout = absl::Milliseconds(20)});
  loader->Reset(0);
  EXPECT_FALSE(loader->Next().has_value());
  EXPECT_EQ(loader->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(loader->status().message().find("batch 0 of 26"), std::string::npos) << loader->status();
  blocking->Release();  // lets the worker finish its batch, so the destructor can join it
}

TEST(DataLoader, MisuseIsReportedAsStatus) {
  auto ds = RandomDataset();
  auto loader = Loader(ds, Sampler(kN, 1, 0, true), {});
  EXPECT_FALSE(loader->Next().has_value());
  EXPECT_EQ(loader->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DataLoader::Create(ds, Sampler(kN, 1, 0, true), {.batch_size = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataLoader::Create(ds, Sampler(kN, 1, 0, true), {.prefetch_depth = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataLoader::Create(ds, Sampler(kN + 1, 1, 0, true), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataLoader::Create(ds, Sampler(kN, 1, 0, true), {.device = Device::CUDA(64)}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DataLoader, AnEmptyShardYieldsNoBatches) {
  auto ds = RandomDataset();
  // 103 examples over 200 replicas with drop_last: every rank gets 0 indices.
  auto s = DistributedSampler::Create(kN, {.num_replicas = 200, .rank = 5, .drop_last = true});
  ASSERT_TRUE(s.ok());
  auto loader = Loader(ds, *s, {.batch_size = 4});
  EXPECT_TRUE(Epoch(*loader, 0).empty());
  EXPECT_EQ(loader->num_batches(), 0);
}

}  // namespace
}  // namespace tinyddp::data
