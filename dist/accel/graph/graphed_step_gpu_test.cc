// GraphedStep on a GPU, with DDP on a real one-rank NCCL group (and without DDP): 100 steps replayed from a
// CUDA graph give bit for bit the losses, weights and optimizer state of 100 eager steps, in float32 and
// bf16, with SGD (eager on the host learning rate), AdamW, DDP's fused optimizers, and no DDP at all; eager
// code that allocates between replays never receives the graph's memory; replays call no cudaMalloc; the
// fallbacks (a host rate that moves, Adam's host step count, find_unused_parameters, NoSync) say why, and
// one that happens at the capture leaves the run bit-identical to eager. On two GPUs: a rank that stops replaying is reported by the other's watchdog, naming
// the replay and its collectives. Skips without a GPU (the two-rank test with fewer than two).
#include "dist/accel/graph/graphed_step.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/ddp/ddp.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/store/hash_store.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/device_lr.h"
#include "nn/lr_schedule.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;

#define SKIP_WITHOUT_GPU() \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "needs a CUDA GPU; none is visible"

constexpr int64_t kBatch = 48;
constexpr int kSteps = 100;
const std::vector<int64_t> kDims = {40, 72, 56, 10};  // odd sizes: partial vector packs everywhere

struct Case {
  std::string name;
  nn::Precision precision = nn::Precision::kFloat32;
  bool adamw = false;
  bool ddp = true;
  bool fused = false;  // a FusedOptimizer: per-bucket optimizers stepped at the end of backward
  bool in_backward = false;  // ... or during it, on the reducer's stream (--optimizer_in_backward)
};

// Every step's batch, made on the device once: step k reads rows [k*B, (k+1)*B).
struct Data {
  Tensor inputs, labels;
  explicit Data(Device device) {
    inputs = Tensor::Empty({kSteps * kBatch, kDims.front()}, DType::kFloat32, device);
    ops::NormalInit(inputs, 0.0, 1.0, /*seed=*/77);
    std::vector<int64_t> l(kSteps * kBatch);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int64_t>((i * 7 + i / 13) % kDims.back());
    labels = Tensor::FromVector<int64_t>(l, {kSteps * kBatch}, device);
  }
};

// One model, its DDP, its optimizer, and the two buffers its step reads.
struct Trainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<FusedOptimizer> fused_optimizer;
  std::unique_ptr<nn::DeviceLr> device_lr;  // null: the learning rate is set on the host each step
  std::unique_ptr<nn::LrSchedule> schedule = std::make_unique<nn::CosineWithWarmupLr>(0.05, 10, kSteps);
  Tensor inputs, labels;
  bool fused = false;
  int64_t host_step = 0;

  Trainer(const Case& c, std::shared_ptr<ProcessGroup> pg, Device device, bool lr_on_device) : fused(c.fused) {
    nn::MlpOptions mo;
    mo.device = device;
    mo.seed = 5;
    mo.precision = c.precision;
    model = nn::MLP(kDims, mo);
    auto make = [adamw = c.adamw](std::vector<Variable> params) -> std::unique_ptr<nn::Optimizer> {
      if (adamw) return std::make_unique<nn::AdamW>(std::move(params));
      return std::make_unique<nn::SGD>(std::move(params), nn::SgdOptions{.lr = 0.05, .momentum = 0.9,
                                                                         .weight_decay = 1e-4});
    };
    optimizer = make(model->Parameters());
    optimizer->SetComputeCopies(model->ComputeCopies());
    if (c.ddp) {
      DdpOptions options;
      if (c.in_backward) {  // several buckets, so that all but the last are updated during backward
        options.first_bucket_bytes = 4 << 10;
        options.bucket_cap_bytes = 8 << 10;
      }
      auto created = DistributedDataParallel::Create(*model, pg, options);
      EXPECT_TRUE(created.ok()) << created.status();
      ddp = std::move(*created);
      if (fused) {
        auto attached = FusedOptimizer::Attach(
            *ddp,
            [make, this](std::vector<Variable> params) {
              auto opt = make(std::move(params));
              opt->SetComputeCopies(model->ComputeCopies());
              return opt;
            },
            {.in_backward = c.in_backward});
        EXPECT_TRUE(attached.ok()) << attached.status();
        if (attached.ok()) fused_optimizer = std::move(*attached);
      }
    }
    if (lr_on_device) {
      device_lr = std::make_unique<nn::DeviceLr>(*schedule, kSteps, device);
      optimizer->UseDeviceLr(device_lr->lr());
      if (fused) fused_optimizer->UseDeviceLr(device_lr->lr());
    }
    inputs = Tensor::Empty({kBatch, kDims.front()}, DType::kFloat32, device);
    labels = Tensor::Empty({kBatch}, DType::kInt64, device);
  }

  // The whole step, as a training loop writes it; it only enqueues work.
  Tensor Step() {
    if (device_lr) {
      device_lr->Advance();
    } else {
      const double lr = schedule->LrAt(host_step);
      optimizer->set_lr(lr);
      if (fused) fused_optimizer->SetLr(lr);
    }
    ++host_step;
    optimizer->ZeroGrad();
    const Variable logits = ddp ? ddp->Forward(Variable(inputs)) : model->Forward(Variable(inputs));
    const Variable loss = autograd::CrossEntropy(logits, labels);
    autograd::Backward(loss);
    if (!fused) optimizer->Step();
    return loss.data();
  }
};

// What a run leaves behind, read back to the host as raw bytes.
struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<uint8_t>> state;  // parameters, optimizer state, evaluation outputs
};

std::vector<uint8_t> Bytes(const Tensor& t) {
  const Tensor host = t.To(Device::CPU());
  const auto* p = static_cast<const uint8_t*>(host.data_ptr());
  return std::vector<uint8_t>(p, p + host.nbytes());
}

// Trains `trainer` for kSteps through `graphed` (or eagerly when null). Every 10 steps an evaluation
// forward runs eagerly and its output is kept alive until the end: eager memory taken between replays.
Outcome Train(Trainer& trainer, GraphedStep* graphed, const Data& data) {
  const Device device = trainer.inputs.device();
  Tensor losses = Tensor::Zeros({kSteps}, DType::kFloat32, device);
  std::vector<Tensor> evaluations;
  for (int k = 0; k < kSteps; ++k) {
    ops::CopyInto(trainer.inputs, data.inputs.Rows(k * kBatch, (k + 1) * kBatch));
    ops::CopyInto(trainer.labels, data.labels.Rows(k * kBatch, (k + 1) * kBatch));
    Tensor loss;
    if (graphed != nullptr) {
      absl::StatusOr<Tensor> out = graphed->Run();
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) return {};
      loss = *out;
    } else {
      loss = trainer.Step();
    }
    Tensor slot = losses.Rows(k, k + 1);
    ops::CopyInto(slot, loss.View({1}));
    if (k % 10 == 4) {
      autograd::NoGradGuard no_grad;
      evaluations.push_back(trainer.model->Forward(Variable(data.inputs.Rows(0, 2 * kBatch))).data());
    }
  }
  Outcome o;
  o.losses = losses.ToVector<float>();
  for (const auto& [name, p] : trainer.model->NamedParameters()) o.state.push_back(Bytes(p.data()));
  std::vector<const nn::Optimizer*> optimizers = {trainer.optimizer.get()};
  if (trainer.fused) {
    optimizers.clear();
    for (const auto& f : trainer.fused_optimizer->optimizers()) optimizers.push_back(f.get());
  }
  for (const nn::Optimizer* opt : optimizers) {
    for (const auto& [name, t] : opt->StateTensors()) o.state.push_back(Bytes(t));
  }
  for (const Tensor& e : evaluations) o.state.push_back(Bytes(e));
  return o;
}

std::shared_ptr<ProcessGroup> OneRankNccl() {
  NcclOptions options;
  options.device = 0;
  options.timeout = std::chrono::seconds(60);
  auto pg = ProcessGroupNCCL::Create(std::make_shared<HashStore>(), 0, 1, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::shared_ptr<ProcessGroup>(std::move(*pg)) : nullptr;
}

class GraphedStepEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(GraphedStepEquivalence, OneHundredReplayedStepsMatchOneHundredEagerStepsBitForBit) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const Device device = Device::CUDA(0);
  cuda::SetDevice(0);
  cuda::Stream::SetCurrent(cuda::Stream::Create(0));  // a graph is never recorded on the legacy stream
  std::shared_ptr<ProcessGroup> pg = c.ddp ? OneRankNccl() : nullptr;
  if (c.ddp) {
    ASSERT_NE(pg, nullptr);
  }
  const Data data(device);

  // The reference: eager steps. SGD's learning rate is set on the host, the ordinary way; Adam's bias
  // corrections are computed on the GPU once its step count lives there, so its reference does that too.
  Trainer eager(c, pg, device, /*lr_on_device=*/c.adamw);
  std::vector<std::vector<uint8_t>> initial;
  for (const auto& [name, p] : eager.model->NamedParameters()) initial.push_back(Bytes(p.data()));
  const Outcome want = Train(eager, nullptr, data);

  Trainer replayed(c, pg, device, /*lr_on_device=*/true);
  std::vector<std::string> log;
  GraphedStepOptions options;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  if (replayed.fused_optimizer) {
    options.rebuilt_optimizers = [&replayed] {
      std::vector<const nn::Optimizer*> all;
      for (const auto& opt : replayed.fused_optimizer->optimizers()) all.push_back(opt.get());
      return all;
    };
  }
  GraphedStep graphed(device, [&replayed] { return replayed.Step(); }, replayed.ddp.get(),
                      {replayed.optimizer.get()}, options);
  const Outcome got = Train(replayed, &graphed, data);

  EXPECT_TRUE(graphed.replaying()) << graphed.ModeName();
  EXPECT_EQ(graphed.eager_steps(), 3);
  EXPECT_EQ(graphed.replays(), kSteps - 3);
  if (c.ddp) {
    ASSERT_FALSE(graphed.captured_collectives().empty());
    EXPECT_TRUE(absl::StrContains(graphed.captured_collectives()[0], "AllReduce")) << graphed.captured_collectives()[0];
  }
  ASSERT_FALSE(log.empty());
  EXPECT_TRUE(absl::StrContains(log.back(), "captured the training step after 3 eager steps")) << log.back();

  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_EQ(std::memcmp(&got.losses[k], &want.losses[k], sizeof(float)), 0)
        << "step " << k << ": replayed loss " << got.losses[k] << ", eager " << want.losses[k];
  }
  ASSERT_EQ(got.state.size(), want.state.size());
  for (size_t i = 0; i < want.state.size(); ++i) EXPECT_TRUE(got.state[i] == want.state[i]) << "state tensor " << i;
  if (c.in_backward) {
    ASSERT_GE(replayed.ddp->reducer().num_buckets(), 3);
    EXPECT_GE(replayed.ddp->reducer().buckets_finished_in_backward(), 1) << "nothing was updated during backward";
    // The updates made during backward, on the reducer's stream, are the updates made after it.
    Case after = c;
    after.in_backward = false;
    Trainer plain(after, pg, device, /*lr_on_device=*/c.adamw);
    const Outcome later = Train(plain, nullptr, data);
    ASSERT_EQ(later.state.size(), want.state.size());
    for (size_t i = 0; i < want.state.size(); ++i) {
      EXPECT_TRUE(later.state[i] == want.state[i]) << "state tensor " << i << ": in backward vs after backward";
    }
  }
  // The steps did something: every parameter moved (the labels are a fixed pattern the inputs do not
  // predict, so the loss need not fall; what is compared above is every bit of a real training run).
  for (size_t i = 0; i < initial.size(); ++i) {
    EXPECT_TRUE(want.state[i] != initial[i]) << "parameter " << i << " never moved";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Steps, GraphedStepEquivalence,
    ::testing::Values(Case{"fp32_sgd_ddp"}, Case{"bf16_sgd_ddp", nn::Precision::kBFloat16},
                      Case{"fp32_sgd_ddp_fused", nn::Precision::kFloat32, false, true, true},
                      Case{"bf16_sgd_ddp_fused", nn::Precision::kBFloat16, false, true, true},
                      Case{"fp32_sgd_ddp_in_backward", nn::Precision::kFloat32, false, true, true, true},
                      Case{"bf16_adamw_ddp_in_backward", nn::Precision::kBFloat16, true, true, true, true},
                      Case{"fp32_adamw_ddp", nn::Precision::kFloat32, true},
                      Case{"fp32_sgd_no_ddp", nn::Precision::kFloat32, false, false},
                      Case{"bf16_adamw_no_ddp", nn::Precision::kBFloat16, true, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(GraphedStep, ReplaysCallNoCudaMallocAndEagerWorkBetweenThemAllocatesOutsideTheGraph) {
  SKIP_WITHOUT_GPU();
  const Device device = Device::CUDA(0);
  cuda::SetDevice(0);
  cuda::Stream::SetCurrent(cuda::Stream::Create(0));
  std::shared_ptr<ProcessGroup> pg = OneRankNccl();
  ASSERT_NE(pg, nullptr);
  const Data data(device);
  Trainer t(Case{"fp32"}, pg, device, /*lr_on_device=*/true);
  ops::CopyInto(t.inputs, data.inputs.Rows(0, kBatch));
  ops::CopyInto(t.labels, data.labels.Rows(0, kBatch));  // the step's fixed buffers start uninitialised
  GraphedStep graphed(device, [&t] { return t.Step(); }, t.ddp.get(), {t.optimizer.get()});
  auto evaluate = [&] {
    autograd::NoGradGuard no_grad;
    return t.model->Forward(Variable(data.inputs.Rows(0, 3 * kBatch))).data();
  };
  for (int k = 0; k < 6; ++k) ASSERT_TRUE(graphed.Run().ok());
  ASSERT_TRUE(graphed.replaying());
  const Tensor warm = evaluate();  // the eager pool has its blocks now (held: an output of its own)...
  evaluate();                      // ...and one more output block, cached for the evaluations below
  cuda::Stream::Current(0).Synchronize();
  const cuda::AllocatorStats before = cuda::GetAllocatorStats(0);

  // Replays with eager work between them that frees what it allocates: no new device memory at all.
  for (int k = 0; k < 25; ++k) {
    ops::CopyInto(t.inputs, data.inputs.Rows(k * kBatch, (k + 1) * kBatch));
    ASSERT_TRUE(graphed.Run().ok());
    if (k % 5 == 0) evaluate();
  }
  cuda::Stream::Current(0).Synchronize();
  const cuda::AllocatorStats after = cuda::GetAllocatorStats(0);
  EXPECT_EQ(after.num_cuda_malloc, before.num_cuda_malloc) << "replays (and the eager work between them) reuse blocks";
  EXPECT_EQ(after.num_cuda_free, before.num_cuda_free);
  // Eager memory held across replays (it needs blocks of its own), filled with a value no step writes.
  std::vector<Tensor> kept;
  for (int k = 25; k < 50; ++k) {
    ops::CopyInto(t.inputs, data.inputs.Rows(k * kBatch, (k + 1) * kBatch));
    ASSERT_TRUE(graphed.Run().ok());
    if (k % 5 == 0) {
      Tensor e = evaluate();
      ops::Fill(e, 7.25);
      kept.push_back(e);
    }
  }
  cuda::Stream::Current(0).Synchronize();
  for (const Tensor& e : kept) {
    for (float v : e.ToVector<float>()) ASSERT_EQ(v, 7.25f) << "a replay wrote into memory eager code held";
  }
  EXPECT_GT(graphed.graph().pool_bytes(), 0) << "the step's temporaries live in the graph's private pool";
}

TEST(GraphedStep, AHostLearningRateThatMovesOrAnAdamStepCountOnTheHostSendsTheStepToEagerSayingWhy) {
  SKIP_WITHOUT_GPU();
  const Device device = Device::CUDA(0);
  cuda::SetDevice(0);
  cuda::Stream::SetCurrent(cuda::Stream::Create(0));
  std::shared_ptr<ProcessGroup> pg = OneRankNccl();
  ASSERT_NE(pg, nullptr);
  const Data data(device);
  auto make = [&](const Case& c, std::unique_ptr<nn::LrSchedule> schedule, std::vector<std::string>* log) {
    auto t = std::make_unique<Trainer>(c, pg, device, /*lr_on_device=*/false);
    t->schedule = std::move(schedule);
    ops::CopyInto(t->inputs, data.inputs.Rows(0, kBatch));
    ops::CopyInto(t->labels, data.labels.Rows(0, kBatch));
    GraphedStepOptions options;
    options.log = [log](const std::string& line) { log->push_back(line); };
    Trainer* raw = t.get();
    auto graphed = std::make_unique<GraphedStep>(device, [raw] { return raw->Step(); }, raw->ddp.get(),
                                                 std::vector<const nn::Optimizer*>{raw->optimizer.get()}, options);
    return std::make_pair(std::move(t), std::move(graphed));
  };
  {
    // A cosine set on the host inside the step: seen moving between the warm-up steps, never recorded.
    std::vector<std::string> log;
    auto [t, graphed] = make(Case{"fp32"}, std::make_unique<nn::CosineWithWarmupLr>(0.05, 0, 8), &log);
    for (int k = 0; k < 8; ++k) ASSERT_TRUE(graphed->Run().ok());
    EXPECT_FALSE(graphed->graph().captured());
    EXPECT_TRUE(absl::StrContains(graphed->eager_reason(), "between two warm-up steps")) << graphed->eager_reason();
    EXPECT_TRUE(absl::StrContains(log.back(), "UseDeviceLr")) << log.back();
    EXPECT_EQ(graphed->eager_steps(), 8);
  }
  {
    // A constant host rate is recorded; a set_lr between steps afterwards sends the step back to eager.
    std::vector<std::string> log;
    auto [t, graphed] = make(Case{"fp32"}, std::make_unique<nn::ConstantLr>(0.05), &log);
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(graphed->Run().ok());
    ASSERT_TRUE(graphed->replaying()) << graphed->ModeName();
    t->schedule = std::make_unique<nn::ConstantLr>(0.001);  // ignored by the replays (the host code is not run)...
    t->optimizer->set_lr(0.001);                            // ...but this is seen before the next one
    absl::StatusOr<Tensor> loss = graphed->Run();
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_FALSE(graphed->replaying());
    EXPECT_TRUE(absl::StrContains(graphed->eager_reason(), "changed from 0.05 to 0.001 after the capture"))
        << graphed->eager_reason();
    EXPECT_TRUE(std::isfinite(loss->Item()));
  }
  {
    // AdamW with its step count on the host: refused at the capture, with what to do.
    std::vector<std::string> log;
    Case adamw{"adamw"};
    adamw.adamw = true;
    auto [t, graphed] = make(adamw, std::make_unique<nn::ConstantLr>(1e-3), &log);
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(graphed->Run().ok());
    EXPECT_FALSE(graphed->graph().captured());
    EXPECT_TRUE(absl::StrContains(graphed->eager_reason(), "AdamW passes its step count")) << graphed->eager_reason();
  }
}

// A step schedule on the host whose first drop falls on the captured step: the warm-up saw a constant
// rate, the capture sees it move. The graph holds that step's rate, so it is replayed once (running the
// step again eagerly would run its host code twice); every later step runs eagerly. The run stays bit for
// bit the eager one.
TEST(GraphedStep, ARateThatMovesAtTheCaptureIsReplayedOnceThenEagerAndTheRunStaysBitIdenticalToEager) {
  SKIP_WITHOUT_GPU();
  const Device device = Device::CUDA(0);
  cuda::SetDevice(0);
  cuda::Stream::SetCurrent(cuda::Stream::Create(0));
  std::shared_ptr<ProcessGroup> pg = OneRankNccl();
  ASSERT_NE(pg, nullptr);
  const Data data(device);
  const Case c{"fp32"};
  Trainer eager(c, pg, device, /*lr_on_device=*/false);
  eager.schedule = std::make_unique<nn::StepLr>(0.05, 3, 0.5);  // 0.05 for steps 0-2, then 0.025, ...
  const Outcome want = Train(eager, nullptr, data);

  Trainer t(c, pg, device, /*lr_on_device=*/false);
  t.schedule = std::make_unique<nn::StepLr>(0.05, 3, 0.5);
  std::vector<std::string> log;
  GraphedStepOptions options;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  GraphedStep graphed(device, [&t] { return t.Step(); }, t.ddp.get(), {t.optimizer.get()}, options);
  const Outcome got = Train(t, &graphed, data);

  EXPECT_TRUE(graphed.graph().captured());
  EXPECT_EQ(graphed.replays(), 1);
  EXPECT_EQ(graphed.eager_steps(), kSteps - 1);
  EXPECT_FALSE(graphed.replaying());
  EXPECT_TRUE(absl::StrContains(graphed.eager_reason(), "changed from 0.05 to 0.025 between the last eager step and "
                                "the captured one")) << graphed.eager_reason();
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_EQ(std::memcmp(&got.losses[k], &want.losses[k], sizeof(float)), 0)
        << "step " << k << ": graphed-then-eager loss " << got.losses[k] << ", eager " << want.losses[k];
  }
  ASSERT_EQ(got.state.size(), want.state.size());
  for (size_t i = 0; i < want.state.size(); ++i) EXPECT_TRUE(got.state[i] == want.state[i]) << "state tensor " << i;
}

TEST(GraphedStep, FindUnusedParametersAndNoSyncRunEagerlyAndSayWhy) {
  SKIP_WITHOUT_GPU();
  const Device device = Device::CUDA(0);
  cuda::SetDevice(0);
  cuda::Stream::SetCurrent(cuda::Stream::Create(0));
  std::shared_ptr<ProcessGroup> pg = OneRankNccl();
  ASSERT_NE(pg, nullptr);
  const Data data(device);
  {
    nn::MlpOptions mo;
    mo.device = device;
    std::shared_ptr<nn::Sequential> model = nn::MLP(kDims, mo);
    DdpOptions options;
    options.find_unused_parameters = true;
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    nn::SGD sgd(model->Parameters(), {.lr = 0.01});
    Tensor x = data.inputs.Rows(0, kBatch), y = data.labels.Rows(0, kBatch);
    GraphedStep graphed(device, [&] {
      sgd.ZeroGrad();
      const Variable loss = autograd::CrossEntropy((*ddp)->Forward(Variable(x)), y);
      autograd::Backward(loss);
      sgd.Step();
      return loss.data();
    }, ddp->get(), {&sgd}, GraphedStepOptions{.log = [](const std::string&) {}});
    EXPECT_TRUE(absl::StrContains(graphed.eager_reason(), "find_unused_parameters")) << graphed.eager_reason();
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(graphed.Run().ok());
    EXPECT_EQ(graphed.eager_steps(), 5);
    EXPECT_FALSE(graphed.graph().captured());
  }
  {
    Trainer t(Case{"fp32"}, pg, device, /*lr_on_device=*/true);
    ops::CopyInto(t.inputs, data.inputs.Rows(0, kBatch));
    ops::CopyInto(t.labels, data.labels.Rows(0, kBatch));  // the step's fixed buffers start uninitialised
    GraphedStep graphed(device, [&t] { return t.Step(); }, t.ddp.get(), {t.optimizer.get()},
                        GraphedStepOptions{.log = [](const std::string&) {}});
    ASSERT_TRUE(graphed.Run().ok());
    {
      DistributedDataParallel::NoSyncGuard no_sync = t.ddp->NoSync();
      ASSERT_TRUE(graphed.Run().ok());
    }
    EXPECT_TRUE(absl::StrContains(graphed.eager_reason(), "NoSync")) << graphed.eager_reason();
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(graphed.Run().ok());
    EXPECT_FALSE(graphed.graph().captured()) << "gradient accumulation is never recorded";
  }
}

// Two ranks replay together; then rank 1 stops (it stays alive, as a hung rank would). Rank 0's next replay
// waits in its all_reduce for a peer that never comes: its watchdog, which holds every replay, aborts the
// communicator after the group's timeout, the replay's NCCL kernel exits, and Run() reports the failure
// naming the replay and the collectives it holds.
TEST(GraphedStep, ARankThatStopsReplayingIsReportedByTheOtherRanksWatchdogNamingTheReplay) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs, " << cuda::DeviceCount() << " visible";
  testing::RunOnRanks(2, [](const testing::RankContext& ctx) {
    cuda::SetDevice(ctx.rank);
    cuda::Stream::SetCurrent(cuda::Stream::Create(ctx.rank));
    NcclOptions options;
    options.device = ctx.rank;
    options.timeout = std::chrono::seconds(10);
    auto created = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
    ASSERT_TRUE(created.ok()) << created.status();
    std::shared_ptr<ProcessGroup> pg(std::move(*created));
    const Device device = Device::CUDA(ctx.rank);
    const Data data(device);
    Trainer t(Case{"fp32"}, pg, device, /*lr_on_device=*/true);
    ops::CopyInto(t.inputs, data.inputs.Rows(ctx.rank * kBatch, (ctx.rank + 1) * kBatch));
    ops::CopyInto(t.labels, data.labels.Rows(0, kBatch));
    GraphedStep graphed(device, [&t] { return t.Step(); }, t.ddp.get(), {t.optimizer.get()},
                        GraphedStepOptions{.log = [](const std::string&) {}});
    for (int k = 0; k < 8; ++k) ASSERT_TRUE(graphed.Run().ok());
    ASSERT_TRUE(graphed.replaying());
    cuda::Stream::Current(ctx.rank).Synchronize();
    ASSERT_TRUE(ctx.store->Set(absl::StrCat("replayed/", ctx.rank), std::string("1")).ok());
    ASSERT_TRUE(ctx.store->Wait({"replayed/0", "replayed/1"}, std::chrono::seconds(60)).ok());
    if (ctx.rank == 1) {
      // Stop replaying, stay alive until rank 0 has seen the failure, then leave without the group's teardown.
      ASSERT_TRUE(ctx.store->Wait({"diagnosed"}, std::chrono::seconds(120)).ok());
      std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    absl::Status status;
    const auto started = std::chrono::steady_clock::now();
    for (int k = 0; k < 100000 && status.ok(); ++k) {
      status = graphed.Run().status();
      if (std::chrono::steady_clock::now() - started > std::chrono::seconds(90)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(ctx.store->Set("diagnosed", std::string("1")).ok());
    ASSERT_FALSE(status.ok()) << "the replays after rank 1 stopped must fail, not hang";
    EXPECT_TRUE(absl::StrContains(status.message(), "CUDA graph replay of the training step on rank 0")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "did not finish within 10000 ms")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "AllReduce(float32")) << status;
    std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
  });
}

}  // namespace
}  // namespace tinyddp::dist
