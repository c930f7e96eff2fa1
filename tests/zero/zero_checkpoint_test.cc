// ZeRO-1 checkpoints across rank counts, with real processes over Gloo and real files: a consolidated
// checkpoint (the model's state_dict and plain DDP's optimizer state, PyTorch's names) written by 2 ranks
// loads at 3 ranks, which cut it into other blocks; saved again without a step it is the same file, bit
// for bit; and training goes on at 3 ranks exactly as plain DDP resumed from the same files does. A state
// that does not fit the model is refused and changes nothing.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/zero/reduce_scatter_hook.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/checkpoint.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;
using zero::ZeroRedundancyOptimizer;

const std::vector<int64_t> kDims = {13, 17, 11, 5};
constexpr int64_t kGlobalBatch = 12;  // 6 per rank on 2 ranks, 4 on 3

zero::OptimizerFactory Factory(bool adamw) {
  if (adamw) {
    return [](std::vector<Variable> p) -> std::unique_ptr<nn::Optimizer> {
      nn::AdamWOptions o;
      o.lr = 1e-2;
      return std::make_unique<nn::AdamW>(std::move(p), o);
    };
  }
  return [](std::vector<Variable> p) -> std::unique_ptr<nn::Optimizer> {
    nn::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    return std::make_unique<nn::SGD>(std::move(p), o);
  };
}

DdpOptions Options() {
  DdpOptions o;
  o.first_bucket_bytes = 256;
  o.bucket_cap_bytes = 700;
  return o;
}

// The same buckets, padded and reduce-scattered over `pg`: the DDP ZeRO-1 attaches to.
DdpOptions ZeroOptions(const ProcessGroup& pg) {
  DdpOptions o = Options();
  o.comm_hook = zero::ReduceScatterHook(pg);
  return o;
}

// ZeRO-1 attached to `ddp`, or null (a test failure) when it refuses.
std::unique_ptr<ZeroRedundancyOptimizer> Attach(DistributedDataParallel& ddp, bool adamw) {
  absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> zero = ZeroRedundancyOptimizer::Attach(ddp, Factory(adamw));
  EXPECT_TRUE(zero.ok()) << zero.status();
  return zero.ok() ? *std::move(zero) : nullptr;
}

// A folder every process of the test agrees on (RunOnRanks re-runs the test body in each rank's process).
std::string Folder(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

// This rank's rows of step `step`'s global batch.
Batch Mine(const RankContext& ctx, int step) {
  const Batch all = ddp_testing::MakeBatch(kGlobalBatch, kDims.front(), kDims.back(), 500 + step);
  const int64_t per = kGlobalBatch / ctx.world_size;
  return ddp_testing::Rows(all, ctx.rank * per, (ctx.rank + 1) * per);
}

void Step(DistributedDataParallel& ddp, nn::Module& model, const RankContext& ctx, int step) {
  const Batch mine = Mine(ctx, step);
  model.ZeroGrad();
  autograd::Backward(autograd::CrossEntropy(ddp.Forward(Variable(mine.x)), mine.labels));
}

// Collective: ZeRO-1's state, consolidated into an unsharded optimizer over the model; rank 0 writes the
// model and that optimizer into `dir`.
void SaveConsolidated(ZeroRedundancyOptimizer& zero, nn::Module& model, bool adamw, const RankContext& ctx,
                      const std::string& dir) {
  absl::StatusOr<nn::TensorMap> state = zero.ConsolidatedStateTensors();
  ASSERT_TRUE(state.ok()) << state.status();
  std::unique_ptr<nn::Optimizer> full = Factory(adamw)(model.Parameters());
  ASSERT_TRUE(full->LoadStateTensors(*state).ok());
  if (ctx.rank != 0) return;
  ASSERT_TRUE(nn::SaveModule(model, dir + "/model.safetensors").ok());
  ASSERT_TRUE(nn::SaveOptimizer(*full, dir + "/optimizer.safetensors").ok());
}

void SaveAtTwoResumeAtThree(bool adamw) {
  const std::string name = adamw ? "adamw" : "sgd";
  const std::string at2 = Folder("saved_at_2_" + name), at3 = Folder("saved_again_at_3_" + name);

  RunOnRanks(2, [&](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 3;
    auto model = nn::MLP(kDims, mo);
    auto ddp = DistributedDataParallel::Create(*model, pg, ZeroOptions(*pg));
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    std::unique_ptr<ZeroRedundancyOptimizer> sharded = Attach(**ddp, adamw);
    ASSERT_NE(sharded, nullptr);
    for (int step = 0; step < 3; ++step) Step(**ddp, *model, ctx, step);
    SaveConsolidated(*sharded, *model, adamw, ctx, at2);
  });

  RunOnRanks(3, [&](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    // Two models from the 2-rank files, initialised differently first so that the load is what counts:
    // one resumed under ZeRO-1 (3 blocks per bucket now), one under plain DDP.
    nn::MlpOptions mo;
    mo.seed = 99;
    auto zero_model = nn::MLP(kDims, mo);
    auto plain_model = nn::MLP(kDims, mo);
    std::unique_ptr<nn::Optimizer> loaded = Factory(adamw)(zero_model->Parameters());
    std::unique_ptr<nn::Optimizer> plain_opt = Factory(adamw)(plain_model->Parameters());
    for (nn::Module* m : {zero_model.get(), plain_model.get()}) {
      ASSERT_TRUE(nn::LoadModule(*m, at2 + "/model.safetensors").ok());
    }
    ASSERT_TRUE(nn::LoadOptimizer(*loaded, at2 + "/optimizer.safetensors").ok());
    ASSERT_TRUE(nn::LoadOptimizer(*plain_opt, at2 + "/optimizer.safetensors").ok());

    auto zero = DistributedDataParallel::Create(*zero_model, pg, ZeroOptions(*pg));
    auto plain = DistributedDataParallel::Create(*plain_model, pg, Options());
    ASSERT_TRUE(zero.ok() && plain.ok());
    std::unique_ptr<ZeroRedundancyOptimizer> sharded = Attach(**zero, adamw);
    ASSERT_NE(sharded, nullptr);
    ASSERT_TRUE(sharded->LoadConsolidatedStateTensors(loaded->StateTensors()).ok());

    // Saved again without a step: the same files.
    SaveConsolidated(*sharded, *zero_model, adamw, ctx, at3);

    // Training goes on, at 3 ranks, as plain DDP resumed from the same files trains.
    for (int step = 3; step < 6; ++step) {
      Step(**zero, *zero_model, ctx, step);
      const Batch mine = Mine(ctx, step);
      plain_opt->ZeroGrad();
      autograd::Backward(autograd::CrossEntropy((*plain)->Forward(Variable(mine.x)), mine.labels));
      plain_opt->Step();
      const std::string when = absl::StrCat("step ", step + 1, " at 3 ranks after resuming (", name, ")");
      ddp_testing::ExpectParametersNear(*zero_model, *plain_model, 0, 0, when);
      ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *zero_model, when);
    }
    absl::StatusOr<nn::TensorMap> state = sharded->ConsolidatedStateTensors();
    ASSERT_TRUE(state.ok()) << state.status();
    for (const auto& [key, want] : plain_opt->StateTensors()) {
      ASSERT_EQ(state->count(key), 1u) << key;
      ddp_testing::ExpectTensorNear(state->at(key), want, 0, 0, "optimizer state " + key + " after resuming at 3");
    }
  });

  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const std::string want = testing::ReadFile(at2 + file);
    ASSERT_GT(want.size(), 1000u) << at2 + file;
    EXPECT_TRUE(testing::ReadFile(at3 + file) == want) << file << " saved at 3 ranks differs from the one saved at 2";
  }
}

TEST(ZeroCheckpoint, SgdStateSavedAtTwoRanksResumesAtThreeSavesTheSameBitsAndTrainsOnAsPlainDdp) {
  SaveAtTwoResumeAtThree(/*adamw=*/false);
}

TEST(ZeroCheckpoint, AdamWStateSavedAtTwoRanksResumesAtThreeSavesTheSameBitsAndTrainsOnAsPlainDdp) {
  SaveAtTwoResumeAtThree(/*adamw=*/true);
}

TEST(ZeroCheckpoint, RefusesAStateThatDoesNotFitAndChangesNothing) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto model = nn::MLP(kDims, nn::MlpOptions{});
    auto ddp = DistributedDataParallel::Create(*model, pg, ZeroOptions(*pg));
    ASSERT_TRUE(ddp.ok());
    std::unique_ptr<ZeroRedundancyOptimizer> sharded = Attach(**ddp, /*adamw=*/true);
    ASSERT_NE(sharded, nullptr);
    for (int step = 0; step < 2; ++step) Step(**ddp, *model, ctx, step);
    ZeroRedundancyOptimizer& z = *sharded;
    absl::StatusOr<nn::TensorMap> good = z.ConsolidatedStateTensors();
    ASSERT_TRUE(good.ok());

    struct Case {
      std::string what, want;
      nn::TensorMap state;
    };
    std::vector<Case> cases;
    cases.push_back({"unknown parameter", "names parameter 6", *good});
    cases.back().state["state.6.exp_avg"] = Tensor::Zeros({3}, DType::kFloat32, Device::CPU());
    cases.push_back({"wrong shape", "but parameter '0.weight' is float32 [17, 13]", *good});
    cases.back().state["state.0.exp_avg"] = Tensor::Zeros({13, 17}, DType::kFloat32, Device::CPU());
    cases.push_back({"different steps in one bucket", "ZeRO keeps one per shard", *good});
    cases.back().state["state.4.step"] = Tensor::Full({}, 7.0, DType::kFloat32);
    cases.push_back({"bad name", "is not named state.<parameter>.<field>", *good});
    cases.back().state["momentum"] = Tensor::Zeros({1}, DType::kFloat32, Device::CPU());
    for (const Case& c : cases) {
      const absl::Status s = z.LoadConsolidatedStateTensors(c.state);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
      EXPECT_NE(s.message().find(c.want), std::string::npos) << c.what << ": " << s;
    }
    absl::StatusOr<nn::TensorMap> after = z.ConsolidatedStateTensors();
    ASSERT_TRUE(after.ok());
    for (const auto& [key, t] : *good) ddp_testing::ExpectTensorNear(after->at(key), t, 0, 0, "unchanged " + key);
  });
}

}  // namespace
}  // namespace tinyddp::dist
