// Tensor parallelism (tensor_parallel_mlp.h) on real processes over Gloo, against one process:
//   * tp = 2 and 4 train like one process on the same batch: the same losses, and GatherInto /
//     GatherOptimizerState give the one-process model and optimizer state, with SGD (momentum) and AdamW,
//     on an uneven hidden size (7), one and two column -> row pairs, an odd last Linear (replicated) and a
//     lone Linear; under bf16 mixed precision too;
//   * dp = 2 x tp = 2 on a DeviceMesh, DDP over the data-parallel group wrapping the tensor-parallel model,
//     trains like DDP with dp = 2 alone at the same per-replica batch;
//   * a one-process checkpoint (model and optimizer state) loads at tp = 2 bit for bit, and training on from
//     it goes where the uninterrupted one-process run goes;
//   * a failed all_reduce, in forward or in backward, reaches status(), naming which one; bad inputs get
//     clear errors;
//   * a traced step records each layer's compute and each all_reduce, named after f or g and its layer, and
//     tracing changes no bit of training.
//
// Tolerances: tp ranks compute the same math with the additions in another order. A row-parallel layer sums
// its input features in tp partial sums that the all_reduce then adds, where one process's GEMM adds them in
// one loop; the column layer's input gradient likewise. Each such sum may differ from one process's in its
// last bit (~6e-8 relative), and training carries that on. Measured after 4 steps on these models, float32:
// parameters within 1.2e-7 absolute (6e-6 relative for the smallest), optimizer states within 3e-8, losses
// equal here. The checks allow 1e-5 absolute + 1e-4 relative: about a hundred times that, and still far
// below what a skipped all_reduce or a bias added on every rank does (each of those fails these tests).
// Under bf16 (activations and partial sums rounded to 8 bits before the sum) the measured gap is 4e-4 in the
// parameters after 4 AdamW steps of lr 1e-2 and 1e-4 in the loss; the bf16 checks allow 2e-3 + 1e-2
// relative, and 2e-3 relative of the loss.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/subgroups/device_mesh.h"
#include "dist/parallel/tensor/tensor_parallel_mlp.h"
#include "dist/process_group/collective_observer.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "nlohmann/json.hpp"

namespace tinyddp::dist::tensor_parallel {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;

// Hidden 7 is uneven over 2 and 4 ranks; {13, 7, 11, 5} ends in a replicated Linear; {13, 7, 9, 11, 5} has
// two pairs (the second pair's input needs a gradient: f's backward all_reduce runs); {13, 5} is one Linear.
const std::vector<std::vector<int64_t>> kModels = {{13, 7, 5}, {13, 7, 11, 5}, {13, 7, 9, 11, 5}, {13, 5}};
constexpr int64_t kBatch = 6;
constexpr int kSteps = 4;
constexpr double kAtol = 1e-5, kRtol = 1e-4;

enum class Opt { kSgdMomentum, kAdamW };
const char* Name(Opt kind) { return kind == Opt::kSgdMomentum ? "SGD(momentum)" : "AdamW"; }

std::unique_ptr<nn::Optimizer> MakeOptimizer(Opt kind, std::vector<Variable> params) {
  if (kind == Opt::kSgdMomentum) {
    return std::make_unique<nn::SGD>(std::move(params),
                                     nn::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  }
  nn::AdamWOptions options;
  options.lr = 1e-2;
  return std::make_unique<nn::AdamW>(std::move(params), options);
}

nn::TensorMap Parameters(const nn::Module& model) {
  nn::TensorMap map;
  for (const auto& [name, p] : model.NamedParameters()) map[name] = p.data();
  return map;
}

// The same names and shapes, and every value within kAtol + kRtol * |expected|.
void ExpectNear(const nn::TensorMap& actual, const nn::TensorMap& expected, const std::string& what) {
  std::vector<std::string> names;
  for (const auto& [name, t] : actual) names.push_back(name);
  std::vector<std::string> want;
  for (const auto& [name, t] : expected) want.push_back(name);
  ASSERT_EQ(names, want) << what << ": other names";
  for (const auto& [name, e] : expected) {
    const Tensor& a = actual.at(name);
    ASSERT_EQ(a.shape(), e.shape()) << what << ": " << name;
    ddp_testing::ExpectTensorNear(a, e, kAtol, kRtol, absl::StrCat(what, ": ", name));
  }
}

void ExpectSameBits(const nn::TensorMap& actual, const nn::TensorMap& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, e] : expected) {
    ASSERT_EQ(actual.count(name), 1u) << what << ": missing " << name;
    EXPECT_EQ(actual.at(name).To(Device::CPU()).ToVector<float>(), e.To(Device::CPU()).ToVector<float>())
        << what << ": " << name;
  }
}

// One step of a model (through `forward`) and its optimizer on `batch`; the loss.
template <typename Forward>
float Step(Forward&& forward, nn::Optimizer& opt, const Batch& batch) {
  opt.ZeroGrad();
  const Variable loss = autograd::CrossEntropy(forward(Variable(batch.x)), batch.labels);
  autograd::Backward(loss);
  opt.Step();
  return static_cast<float>(loss.data().Item());
}

// tp = the whole group; every rank also trains the one-process model itself, on the same batches.
void TrainLikeOneProcess(const RankContext& ctx, const std::vector<int64_t>& dims, Opt kind, nn::Precision precision) {
  auto pg = ddp_testing::MakeGlooGroup(ctx);
  ASSERT_NE(pg, nullptr);
  const nn::MlpOptions options{.seed = 11, .precision = precision};
  auto one = nn::MLP(dims, options);
  auto full = nn::MLP(dims, options);
  auto made = TensorParallelMlp::Create(*full, pg);
  ASSERT_TRUE(made.ok()) << made.status();
  TensorParallelMlp& tp = **made;
  std::unique_ptr<nn::Optimizer> one_opt = MakeOptimizer(kind, one->Parameters());
  std::unique_ptr<nn::Optimizer> tp_opt = MakeOptimizer(kind, tp.Parameters());
  one_opt->SetComputeCopies(one->ComputeCopies());
  tp_opt->SetComputeCopies(tp.ComputeCopies());
  const bool bf16 = precision == nn::Precision::kBFloat16;
  const std::string what =
      absl::StrCat("MLP ", absl::StrJoin(dims, "-"), ", ", Name(kind), ", tp = ", ctx.world_size, bf16 ? ", bf16" : "");
  for (int step = 0; step < kSteps; ++step) {
    const Batch batch = ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 100 + step);  // every tp rank's
    const float want = Step([&](const Variable& x) { return one->Forward(x); }, *one_opt, batch);
    const float got = Step([&](const Variable& x) { return tp.Forward(x); }, *tp_opt, batch);
    ASSERT_TRUE(tp.status().ok()) << tp.status();
    EXPECT_NEAR(got, want, bf16 ? 2e-3 * std::fabs(want) : kAtol + kRtol * std::fabs(want))
        << what << ", loss of step " << step + 1;
  }
  auto gathered = nn::MLP(dims, nn::MlpOptions{.seed = 999, .precision = precision});
  ASSERT_TRUE(tp.GatherInto(*gathered).ok());
  absl::StatusOr<nn::TensorMap> state = tp.GatherOptimizerState(*tp_opt);
  ASSERT_TRUE(state.ok()) << state.status();
  if (bf16) {  // see the header comment
    for (const auto& [name, t] : Parameters(*one)) {
      ddp_testing::ExpectTensorNear(Parameters(*gathered).at(name), t, 2e-3, 1e-2, absl::StrCat(what, ": ", name));
    }
  } else {
    ExpectNear(Parameters(*gathered), Parameters(*one), what + ", the gathered model");
    ExpectNear(*state, one_opt->StateTensors(), what + ", the gathered optimizer state");
  }
  // One model: the gathered whole is the same bits on every tp rank (replicated layers included).
  ddp_testing::ExpectBitIdenticalAcrossRanks(*pg, *gathered, what);
}

class TensorParallel : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallel, TrainsLikeOneProcessAndGathersIntoItsModelAndOptimizerState) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    for (const std::vector<int64_t>& dims : kModels) {
      for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
        if (ctx.world_size == 4 && kind == Opt::kAdamW) continue;  // 4 ranks: SGD is enough (and faster)
        TrainLikeOneProcess(ctx, dims, kind, nn::Precision::kFloat32);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallel, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("Tp", info.param); });

TEST(TensorParallel, UnderBf16MixedPrecisionTrainsLikeOneProcessInBf16) {
  RunOnRanks(2, [](const RankContext& ctx) {
    TrainLikeOneProcess(ctx, {13, 7, 9, 11, 5}, Opt::kAdamW, nn::Precision::kBFloat16);
  });
}

TEST(TensorParallel, DataParallelTimesTensorParallelTrainsLikeDdpAlone) {
  RunOnRanks(4, [](const RankContext& ctx) {
    auto world = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(world, nullptr);
    auto mesh = DeviceMesh::Create(*world, ctx.store, /*dp=*/2, /*tp=*/2);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const std::vector<int64_t> dims = {13, 7, 9, 11, 5, 3};  // two pairs and a replicated last layer
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      // DDP with dp = 2 alone: each rank of a mesh column is one replica (the two columns do the same work).
      auto plain = nn::MLP(dims, nn::MlpOptions{.seed = 21});
      auto plain_ddp = DistributedDataParallel::Create(*plain, mesh->dp_group);
      ASSERT_TRUE(plain_ddp.ok()) << plain_ddp.status();
      std::unique_ptr<nn::Optimizer> plain_opt = MakeOptimizer(kind, plain->Parameters());
      // dp x tp: the tensor-parallel model over the row, DDP over the column.
      auto full = nn::MLP(dims, nn::MlpOptions{.seed = 21});
      auto tp = TensorParallelMlp::Create(*full, mesh->tp_group);
      ASSERT_TRUE(tp.ok()) << tp.status();
      auto ddp = DistributedDataParallel::Create(**tp, mesh->dp_group);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      std::unique_ptr<nn::Optimizer> tp_opt = MakeOptimizer(kind, (*tp)->Parameters());
      const std::string what = absl::StrCat(Name(kind), ", ", mesh->ToString(ctx.rank));
      for (int step = 0; step < kSteps; ++step) {
        // Each replica its own rows; the tp ranks of a row the same ones.
        const Batch all = ddp_testing::MakeBatch(2 * kBatch, dims.front(), dims.back(), 200 + step);
        const Batch mine = ddp_testing::Rows(all, mesh->dp_index * kBatch, (mesh->dp_index + 1) * kBatch);
        const float want = Step([&](const Variable& x) { return (*plain_ddp)->Forward(x); }, *plain_opt, mine);
        const float got = Step([&](const Variable& x) { return (*ddp)->Forward(x); }, *tp_opt, mine);
        ASSERT_TRUE((*tp)->status().ok()) << (*tp)->status();
        ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
        EXPECT_NEAR(got, want, kAtol + kRtol * std::fabs(want)) << what << ", loss of step " << step + 1;
      }
      auto gathered = nn::MLP(dims, nn::MlpOptions{.seed = 999});
      ASSERT_TRUE((*tp)->GatherInto(*gathered).ok());
      ExpectNear(Parameters(*gathered), Parameters(*plain), what + ", the gathered model");
      absl::StatusOr<nn::TensorMap> state = (*tp)->GatherOptimizerState(*tp_opt);
      ASSERT_TRUE(state.ok()) << state.status();
      ExpectNear(*state, plain_opt->StateTensors(), what + ", the gathered optimizer state");
      ddp_testing::ExpectBitIdenticalAcrossRanks(*world, *gathered, what);  // one model on all four ranks
    }
  });
}

TEST(TensorParallel, LoadsAOneProcessCheckpointBitForBitAndTrainsOnLikeTheUninterruptedRun) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    const std::vector<int64_t> dims = {13, 7, 11, 5};
    for (Opt kind : {Opt::kSgdMomentum, Opt::kAdamW}) {
      // One process trains 2 steps: its model and state are the checkpoint (what --resume reads).
      auto one = nn::MLP(dims, nn::MlpOptions{.seed = 5});
      std::unique_ptr<nn::Optimizer> one_opt = MakeOptimizer(kind, one->Parameters());
      auto forward_one = [&](const Variable& x) { return one->Forward(x); };
      for (int step = 0; step < 2; ++step) {
        Step(forward_one, *one_opt, ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 300 + step));
      }
      // tp = 2 from another seed, then loaded: the checkpoint's values exactly, gathered back bit for bit.
      auto other = nn::MLP(dims, nn::MlpOptions{.seed = 77});
      auto tp = TensorParallelMlp::Create(*other, pg);
      ASSERT_TRUE(tp.ok()) << tp.status();
      std::unique_ptr<nn::Optimizer> tp_opt = MakeOptimizer(kind, (*tp)->Parameters());
      ASSERT_TRUE((*tp)->LoadFrom(*one).ok());
      const absl::Status loaded = (*tp)->LoadOptimizerState(one_opt->StateTensors(), *tp_opt);
      ASSERT_TRUE(loaded.ok()) << loaded;
      const std::string what = absl::StrCat(Name(kind), " checkpoint at tp = 2");
      auto gathered = nn::MLP(dims, nn::MlpOptions{.seed = 999});
      ASSERT_TRUE((*tp)->GatherInto(*gathered).ok());
      ExpectSameBits(Parameters(*gathered), Parameters(*one), what + ": the model");
      absl::StatusOr<nn::TensorMap> state = (*tp)->GatherOptimizerState(*tp_opt);
      ASSERT_TRUE(state.ok()) << state.status();
      ExpectSameBits(*state, one_opt->StateTensors(), what + ": the optimizer state");
      // Both train on 3 steps: the resumed run goes where the uninterrupted one goes.
      for (int step = 2; step < 5; ++step) {
        const Batch batch = ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 300 + step);
        const float want = Step(forward_one, *one_opt, batch);
        const float got = Step([&](const Variable& x) { return (*tp)->Forward(x); }, *tp_opt, batch);
        EXPECT_NEAR(got, want, kAtol + kRtol * std::fabs(want)) << what << ", loss of step " << step + 1;
      }
      ASSERT_TRUE((*tp)->GatherInto(*gathered).ok());
      ExpectNear(Parameters(*gathered), Parameters(*one), what + ", trained on");
      state = (*tp)->GatherOptimizerState(*tp_opt);
      ASSERT_TRUE(state.ok()) << state.status();
      ExpectNear(*state, one_opt->StateTensors(), what + ", trained on: the optimizer state");
    }
  });
}

// Refuses the n-th AllReduce this rank issues (every rank attaches one, so no rank waits for another).
class RefuseNthAllReduce : public CollectiveObserver {
 public:
  explicit RefuseNthAllReduce(int n) : n_(n) {}
  absl::Status Admit(const CollectiveInfo& info) override {
    if (info.op != "AllReduce" || ++seen_ != n_) return absl::OkStatus();
    return absl::UnavailableError("refused by the test: a peer died");
  }

 private:
  const int n_;
  int seen_ = 0;
};

TEST(TensorParallel, AFailedAllReduceInForwardOrBackwardReachesStatusNamingIt) {
  RunOnRanks(2, [](const RankContext& ctx) {
    const std::vector<int64_t> dims = {13, 7, 9, 11, 5};  // a step all-reduces: g(2), g(6) in forward, f(4) in backward
    const std::vector<std::pair<int, std::string>> cases = {
        {1, "the all_reduce of layer 2's output (forward of g)"},
        {3, "the all_reduce of layer 4's input gradient (backward of f)"}};
    for (const auto& [n, message] : cases) {
      auto pg = ddp_testing::MakeGlooGroup(ctx);
      ASSERT_NE(pg, nullptr);
      auto full = nn::MLP(dims, nn::MlpOptions{.seed = 3});
      auto tp = TensorParallelMlp::Create(*full, pg);
      ASSERT_TRUE(tp.ok()) << tp.status();
      pg->AddObserver(std::make_shared<RefuseNthAllReduce>(n));
      const Batch batch = ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 9);
      autograd::Backward(autograd::CrossEntropy((*tp)->Forward(Variable(batch.x)), batch.labels));
      const absl::Status status = (*tp)->status();
      ASSERT_FALSE(status.ok()) << "refusing AllReduce #" << n << " went unnoticed";
      EXPECT_TRUE(absl::IsUnavailable(status)) << status;
      EXPECT_NE(status.message().find(message), std::string::npos) << status;
      EXPECT_NE(status.message().find("refused by the test"), std::string::npos) << status;
      // Later steps skip the group (no wait on a dead peer) and keep the first error; so does a checkpoint.
      autograd::Backward(autograd::CrossEntropy((*tp)->Forward(Variable(batch.x)), batch.labels));
      EXPECT_EQ((*tp)->status(), status);
      EXPECT_EQ((*tp)->GatherInto(*full), status);
    }
  });
}

// The trace (TensorParallelMlp::set_tracer) of two pairs, 13-7-9-11-5: per step, g's all_reduce after each
// row layer's forward (layers 1 and 3, counting the Linears from 0) and f's before the second pair's column
// layer in backward (layer 2); none for the first pair's f, whose input is the data. Each layer's forward in
// parts (a row layer's GEMM, then after g its bias and, but for the last, its ReLU, which cannot join the
// GEMM), its backward as one part. Counts only: when Gloo's thread ran each all_reduce varies from run to run.
// Tracing adds identity ops to the graph and nothing else: the traced model trains to the untraced one's bits.
TEST(TensorParallel, ATracedStepRecordsEachLayersComputeAndTheAllReducesOfFAndGAndChangesNoBit) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    const std::vector<int64_t> dims = {13, 7, 9, 11, 5};
    auto full = nn::MLP(dims, nn::MlpOptions{.seed = 3});
    auto traced = TensorParallelMlp::Create(*full, pg);
    ASSERT_TRUE(traced.ok()) << traced.status();
    auto plain = TensorParallelMlp::Create(*full, pg);
    ASSERT_TRUE(plain.ok()) << plain.status();
    Tracer tracer(ctx.rank, Device::CPU());
    (*traced)->set_tracer(&tracer);
    std::unique_ptr<nn::Optimizer> traced_opt = MakeOptimizer(Opt::kSgdMomentum, (*traced)->Parameters());
    std::unique_ptr<nn::Optimizer> plain_opt = MakeOptimizer(Opt::kSgdMomentum, (*plain)->Parameters());
    constexpr int kTraced = 2;
    for (int step = 0; step < kTraced; ++step) {
      const Batch batch = ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 40 + step);  // every tp rank's
      traced_opt->ZeroGrad();
      Variable loss;
      {
        Tracer::Span forward = tracer.Scope("forward", step);  // the loop's own phases, as ddp_mlp records them
        loss = autograd::CrossEntropy((*traced)->Forward(Variable(batch.x)), batch.labels);
      }
      {
        Tracer::Span backward = tracer.Scope("backward", step);
        autograd::Backward(loss);
      }
      traced_opt->Step();
      Step([&](const Variable& x) { return (*plain)->Forward(x); }, *plain_opt, batch);
    }
    ASSERT_TRUE((*traced)->status().ok()) << (*traced)->status();
    ExpectSameBits(Parameters(**traced), Parameters(**plain), "traced against untraced");

    const std::string recorded = tracer.EventsJson();
    const nlohmann::json events = nlohmann::json::parse("[" + recorded + "]");
    std::map<std::pair<std::string, int64_t>, int> count;  // (name, layer) -> spans
    for (const nlohmann::json& e : events) {
      if (e.value("ph", "") != "X") continue;
      const int64_t layer = e.contains("args") ? e["args"].value("i", int64_t{-1}) : -1;
      const std::string name = e["name"].get<std::string>();
      count[{name, layer}] += 1;
      const bool comm = e["tid"].get<int>() == static_cast<int>(TraceTrack::kComm);
      EXPECT_EQ(comm, name == kForwardAllReduceName || name == kBackwardAllReduceName) << e.dump();
    }
    EXPECT_EQ((count[{kForwardAllReduceName, 1}]), kTraced);
    EXPECT_EQ((count[{kForwardAllReduceName, 3}]), kTraced);
    EXPECT_EQ((count[{kBackwardAllReduceName, 2}]), kTraced);
    EXPECT_EQ(count.count({kBackwardAllReduceName, 0}), 0u) << "the first layer's input is the data: no f";
    const std::vector<int> forward_parts = {1, 3, 1, 2};  // GEMM (+ReLU); GEMM, bias, ReLU; GEMM (+ReLU); GEMM, bias
    for (int64_t l = 0; l < 4; ++l) {
      EXPECT_EQ((count[{"forward layer", l}]), kTraced * forward_parts[l]) << "layer " << l;
      EXPECT_EQ((count[{"backward layer", l}]), kTraced) << "layer " << l;
    }
    EXPECT_EQ(count.size(), 2u * kTraced + 3 + 4 + 4) << recorded;  // the phases per step, the sums, the parts

    // Unset, it records nothing more.
    (*traced)->set_tracer(nullptr);
    const Batch batch = ddp_testing::MakeBatch(kBatch, dims.front(), dims.back(), 50);
    autograd::Backward(autograd::CrossEntropy((*traced)->Forward(Variable(batch.x)), batch.labels));
    EXPECT_EQ(tracer.EventsJson(), recorded);
    // The bytes the picture labels the sums with, per Linear: g's output, f's input gradient, none for layer 0.
    const int64_t f32 = 4;
    EXPECT_EQ((*traced)->AllReduceBytes(kBatch),
              (std::vector<int64_t>{0, kBatch * 9 * f32, kBatch * 9 * f32, kBatch * 5 * f32}));
  });
}

TEST(TensorParallel, BadInputsGetErrorsThatSayWhatToChange) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    auto has = [](const absl::Status& s, const std::string& text) {
      return s.message().find(text) != std::string::npos;
    };
    // A hidden layer narrower than the group: refused before any collective, naming the layers.
    const absl::Status narrow = TensorParallelMlp::Create(*nn::MLP({13, 1, 5}), pg).status();
    EXPECT_TRUE(absl::IsInvalidArgument(narrow)) << narrow;
    EXPECT_TRUE(has(narrow, "splits the 1 hidden features between layer 0 (Linear 13 -> 1) and layer 2")) << narrow;
    const absl::Status null = TensorParallelMlp::Create(*nn::MLP({13, 7, 5}), nullptr).status();
    EXPECT_TRUE(absl::IsInvalidArgument(null)) << null;
    // The tp ranks built different models: every rank learns it (the check is collective).
    const absl::Status differ =
        TensorParallelMlp::Create(*nn::MLP({13, ctx.rank == 0 ? int64_t{7} : int64_t{8}, 5}), pg).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(differ)) << differ;
    EXPECT_TRUE(has(differ, "the tp ranks must build the same model")) << differ;

    auto tp = TensorParallelMlp::Create(*nn::MLP({13, 7, 5}), pg);
    ASSERT_TRUE(tp.ok()) << tp.status();
    // A whole model of other dims: refused on every rank before any collective, so nobody hangs.
    auto wrong = nn::MLP({13, 8, 5});
    const absl::Status gather = (*tp)->GatherInto(*wrong);
    EXPECT_TRUE(absl::IsInvalidArgument(gather)) << gather;
    EXPECT_TRUE(has(gather, "'0.weight' float32 [8, 13], but this model's whole '0.weight' is float32 [7, 13]"))
        << gather;
    EXPECT_TRUE(absl::IsInvalidArgument((*tp)->LoadFrom(*wrong)));
    // Optimizer state of another model's shapes; an optimizer over parameters that are not the shards.
    nn::SGD sgd((*tp)->Parameters(), nn::SgdOptions{.lr = 0.1, .momentum = 0.9});
    auto other = nn::MLP({13, 8, 5});
    nn::SGD other_sgd(other->Parameters(), nn::SgdOptions{.lr = 0.1, .momentum = 0.9});
    const Batch batch = ddp_testing::MakeBatch(kBatch, 13, 5, 1);
    Step([&](const Variable& x) { return other->Forward(x); }, other_sgd, batch);
    const absl::Status state = (*tp)->LoadOptimizerState(other_sgd.StateTensors(), sgd);
    EXPECT_TRUE(absl::IsInvalidArgument(state)) << state;
    EXPECT_TRUE(has(state,
                    "'state.0.momentum_buffer' is [8, 13], but parameter 0 ('0.weight') of the whole model "
                    "is [7, 13]"))
        << state;
    EXPECT_TRUE(sgd.StateTensors().empty()) << "a refused state must change nothing";
    const absl::Status stranger = (*tp)->GatherOptimizerState(other_sgd).status();
    EXPECT_TRUE(absl::IsInvalidArgument(stranger)) << stranger;
    EXPECT_TRUE(has(stranger, "is not one of this model's shards")) << stranger;
    // And it says what each rank holds.
    const std::string mine = ctx.rank == 0 ? "rows [0, 4) on tp rank 0 of 2" : "rows [4, 7) on tp rank 1 of 2";
    EXPECT_NE((*tp)->ToString().find(mine), std::string::npos) << (*tp)->ToString();
  });
}

}  // namespace
}  // namespace tinyddp::dist::tensor_parallel
