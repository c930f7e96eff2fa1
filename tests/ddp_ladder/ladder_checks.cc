// The DDP ladder's shared claims (tests/ddp_ladder/ladder_checks.h).
#include "tests/ddp_ladder/ladder_checks.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ladder/ladder.h"
#include "dist/testing/ddp_testing.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace tinyddp::dist::ladder_testing {
namespace {

using autograd::Variable;
using ddp_testing::Batch;

const std::vector<int64_t> kDims = {13, 17, 11, 5};  // 3 layers, odd sizes
constexpr int kSteps = 4;

std::unique_ptr<nn::SGD> MakeSgd(const nn::Module& model) {
  nn::SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 1e-3;
  return std::make_unique<nn::SGD>(model.Parameters(), o);
}

DdpOptions SmallBuckets() {
  DdpOptions options;
  options.first_bucket_bytes = 256;  // the 3 layers' gradients land in several buckets
  options.bucket_cap_bytes = 700;
  return options;
}

struct Trainee {
  std::string rung;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<ladder::DataParallel> dp;
  std::unique_ptr<nn::SGD> sgd;
};

Trainee Make(ProcessGroup& pg, Device device, const std::string& rung, std::shared_ptr<ProcessGroup> shared) {
  nn::MlpOptions mo;
  mo.seed = 42;
  mo.device = device;
  Trainee t{rung, nn::MLP(kDims, mo), nullptr, nullptr};
  if (pg.rank() != 0) ddp_testing::PerturbParameters(*t.model, pg.rank());
  auto dp = ladder::CreateDataParallel(rung, *t.model, std::move(shared), SmallBuckets());
  EXPECT_TRUE(dp.ok()) << rung << ": " << dp.status();
  if (dp.ok()) t.dp = *std::move(dp);
  t.sgd = MakeSgd(*t.model);
  return t;
}

// The mean cross-entropy of `batch`, times `weight`, differentiated.
void Backward(const Variable& logits, const Tensor& labels, double weight) {
  const Variable loss = autograd::CrossEntropy(logits, labels);
  autograd::Backward(loss, weight == 1.0 ? Tensor() : Tensor::Full(loss.shape(), weight, loss.dtype(), loss.device()));
}

// Float rounding allowed between two ways of computing the same weights: the GPU's GEMMs split their sums
// differently for different batch sizes, so they get the looser bound that ddp_equivalence_gpu_test uses.
double Atol(Device device) { return device.is_cuda() ? 1e-5 : 2e-6; }
double Rtol(Device device) { return device.is_cuda() ? 1e-4 : 2e-5; }

// A non-owning shared_ptr to `pg`, for the rungs' factories (the caller keeps pg alive).
std::shared_ptr<ProcessGroup> Borrow(ProcessGroup& pg) { return std::shared_ptr<ProcessGroup>(&pg, [](auto*) {}); }

}  // namespace

void ExpectEveryRungMatchesOneProcess(ProcessGroup& pg, Device device) {
  const int world = pg.size(), rank = pg.rank();
  constexpr int64_t kPerRank = 3;
  std::vector<Trainee> rungs;
  for (const std::string& name : ladder::RungNames()) rungs.push_back(Make(pg, device, name, Borrow(pg)));
  for (const Trainee& t : rungs) ASSERT_NE(t.dp, nullptr);
  nn::MlpOptions mo;
  mo.seed = 42;
  mo.device = device;
  auto reference = nn::MLP(kDims, mo);  // one process, fed the ranks' batches together
  auto ref_sgd = MakeSgd(*reference);
  for (const Trainee& t : rungs) ddp_testing::ExpectParametersNear(*t.model, *reference, 0, 0, t.rung + " at start");

  for (int step = 0; step < kSteps; ++step) {
    const Batch all = ddp_testing::MakeBatch(world * kPerRank, kDims.front(), kDims.back(), 100 + step, device);
    const Batch mine = ddp_testing::Rows(all, rank * kPerRank, (rank + 1) * kPerRank);
    for (Trainee& t : rungs) {
      t.sgd->ZeroGrad(/*set_to_none=*/step % 2 == 0);  // both ways of clearing must work
      Backward(t.dp->Forward(Variable(mine.x)), mine.labels, 1.0);
      ASSERT_TRUE(t.dp->FinishBackward().ok()) << t.rung;
      t.sgd->Step();
    }
    ref_sgd->ZeroGrad();
    Backward(reference->Forward(Variable(all.x)), all.labels, 1.0);
    ref_sgd->Step();
    for (const Trainee& t : rungs) {
      const std::string when = absl::StrCat("--ddp=", t.rung, " after step ", step + 1, " on ", world, " ranks");
      ddp_testing::ExpectParametersNear(*t.model, *reference, Atol(device), Rtol(device), when);
      ddp_testing::ExpectParametersNear(*t.model, *rungs.back().model, Atol(device), Rtol(device),
                                        when + ", against --ddp=full");
      ddp_testing::ExpectBitIdenticalAcrossRanks(pg, *t.model, when);
    }
  }
}

void ExpectAccumulationMatchesOneLargeBatch(ProcessGroup& pg, Device device, const std::string& rung) {
  constexpr int kMicro = 3;        // micro-batches per optimizer step
  constexpr int64_t kMicroRows = 5;  // examples per micro-batch, per rank
  const int world = pg.size(), rank = pg.rank();
  Trainee accumulating = Make(pg, device, rung, Borrow(pg));
  Trainee large = Make(pg, device, rung, Borrow(pg));
  ASSERT_NE(accumulating.dp, nullptr);
  ASSERT_NE(large.dp, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    // Rank r's examples of this step are rows [r*k*b, (r+1)*k*b) of the global batch, as a sampler with
    // batch size k*b would give them; the micro-batches cut them into k pieces of b.
    const Batch all = ddp_testing::MakeBatch(world * kMicro * kMicroRows, kDims.front(), kDims.back(), 7 + step,
                                             device);
    const Batch mine = ddp_testing::Rows(all, rank * kMicro * kMicroRows, (rank + 1) * kMicro * kMicroRows);

    accumulating.sgd->ZeroGrad();
    for (int m = 0; m < kMicro; ++m) {
      const Batch micro = ddp_testing::Rows(mine, m * kMicroRows, (m + 1) * kMicroRows);
      const bool last = m == kMicro - 1;
      Backward(accumulating.dp->Forward(Variable(micro.x), /*sync=*/last), micro.labels, 1.0 / kMicro);
      ASSERT_TRUE(accumulating.dp->FinishBackward().ok());
    }
    accumulating.sgd->Step();

    large.sgd->ZeroGrad();
    Backward(large.dp->Forward(Variable(mine.x)), mine.labels, 1.0);
    ASSERT_TRUE(large.dp->FinishBackward().ok());
    large.sgd->Step();

    const std::string when = absl::StrCat("--ddp=", rung, " after ", step + 1, " steps of ", kMicro, " x ",
                                          kMicroRows, " accumulated vs 1 x ", kMicro * kMicroRows, " on ", world,
                                          " ranks");
    // Measured on CPU: a few elements differ in the last bit or two after each step; 20x tighter than the
    // rungs' comparison with one process.
    ddp_testing::ExpectParametersNear(*accumulating.model, *large.model, Atol(device) / 20, Rtol(device) / 20, when);
    ddp_testing::ExpectBitIdenticalAcrossRanks(pg, *accumulating.model, when);
  }
}

}  // namespace tinyddp::dist::ladder_testing
